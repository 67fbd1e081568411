package storagetest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The actor's files: the driver names them from the address and the root,
// and answers for them (Exists, Remove, Restore, Snapshot, Walk); and
// storage.Syncer, where a DB has it.
var fileTests = []test{
	// storage.Preparation: a driver may honour it or not, but never runs
	// it on a database Open finds, and what an actor writes never reaches
	// another new database (a template).
	{"PrepareOnlyNewDatabases", func(t *testing.T, s suite) {
		f := s.files(t)
		stmt := "CREATE TABLE IF NOT EXISTS _wasmkeep_prepared (k TEXT)"
		prep := storage.Options{Prepare: storage.Preparation{Statements: []string{stmt}, CacheDir: t.TempDir()}}
		openPrepared := func(a abi.Address) storage.DB {
			t.Helper()
			db, err := f.drv.Open(ctx(), f.root, a, prep)
			if err != nil {
				t.Fatalf("Open %q: %v", a.Name, err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		count := func(db storage.DB, sql string) int64 {
			t.Helper()
			var w abi.RowsWriter
			if err := db.HostQuery(ctx(), sql, nil, &w); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			return decode(t, w.Buf).one().Int
		}
		old := addr("c", "old")
		f.write(old, "v")
		db := openPrepared(old)
		if n := count(db, "SELECT count(*) FROM sqlite_schema WHERE name = '_wasmkeep_prepared'"); n != 0 {
			t.Error("the preparation ran on a database Open found")
		}
		if storage.CreatedByOpen(db) {
			t.Error("a database Open found says Open created it (storage.Created)")
		}
		f.close(db)
		for i, name := range []string{"a", "b", "a"} {
			a := addr("c", name)
			db := openPrepared(a)
			// As the kernel does: the statement again unless Open says it
			// created the database (storage.Created), so a database that
			// says so must hold the table, empty.
			if !storage.CreatedByOpen(db) {
				if _, err := db.HostExec(ctx(), stmt); err != nil {
					t.Fatal(err)
				}
			}
			if n := count(db, "SELECT count(*) FROM _wasmkeep_prepared"); n != 0 {
				t.Errorf("new database %d (%q) starts with %d rows another one wrote", i, name, n)
			}
			if _, err := db.HostExec(ctx(), "INSERT INTO _wasmkeep_prepared VALUES (?)", T(name)); err != nil {
				t.Fatal(err)
			}
			put(t, db, name)
			f.close(db)
			f.remove(a)
		}
		f.wantValue(old, "v")
		// Without a cache directory a driver may keep no template; a new
		// database that says Open created it is prepared all the same.
		prep.Prepare.CacheDir = ""
		db = openPrepared(addr("c", "uncached"))
		if storage.CreatedByOpen(db) && count(db, "SELECT count(*) FROM _wasmkeep_prepared") != 0 {
			t.Error("a new database prepared without a cache directory starts with rows")
		}
		f.close(db)
	}},
	{"ExistsFollowsOpenAndRemove", func(t *testing.T, s suite) {
		f := s.files(t)
		a := addr("c", "a")
		f.wantExists(a, false)
		db := f.open(a)
		f.wantExists(a, true) // created by Open, before any write
		put(t, db, "one")
		f.wantExists(a, true)
		f.close(db)
		f.wantExists(a, true)
		f.remove(a)
		f.wantExists(a, false)
		db = f.open(a) // a new, empty database
		if got := get(t, db); got != "" {
			t.Errorf("after Remove the database still holds %q", got)
		}
		f.close(db)
	}},
	{"RemoveOpenClosedAbsent", func(t *testing.T, s suite) {
		f := s.files(t)
		a := addr("c", "a")
		f.remove(a) // absent: nothing to do
		db := f.open(a)
		put(t, db, "kept")
		if err := f.drv.Remove(ctx(), f.root, a); !errors.Is(err, storage.ErrOpen) {
			t.Errorf("Remove of an open actor: %v, want ErrOpen", err)
		}
		if got := get(t, db); got != "kept" {
			t.Errorf("after a refused Remove the open database reads %q", got)
		}
		f.close(db)
		f.wantExists(a, true)
		f.remove(a) // closed
		f.wantExists(a, false)
		f.remove(a) // again: absent
		if left := f.filesUnder(); len(left) != 0 {
			t.Errorf("Remove left files: %v", left)
		}
	}},
	{"OpenedOncePerProcess", func(t *testing.T, s suite) {
		f := s.files(t)
		a := addr("c", "a")
		db := f.open(a)
		if db2, err := f.drv.Open(ctx(), f.root, a, storage.Options{}); !errors.Is(err, storage.ErrOpen) {
			if db2 != nil {
				db2.Close()
			}
			t.Errorf("second Open: %v, want ErrOpen", err)
		}
		f.close(db)
		f.close(f.open(a))
	}},
	{"SnapshotAndRestore", func(t *testing.T, s suite) {
		f := s.files(t)
		a, b := addr("c", "a"), addr("c", "b")
		f.write(a, "old")
		f.write(b, "new")
		if err := f.drv.Snapshot(ctx(), f.root, addr("c", "absent"), &bytes.Buffer{}); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Snapshot of an absent actor: %v, want fs.ErrNotExist", err)
		}
		db := f.open(b)
		if err := f.drv.Snapshot(ctx(), f.root, b, &bytes.Buffer{}); !errors.Is(err, storage.ErrOpen) {
			t.Errorf("Snapshot of an open actor: %v, want ErrOpen", err)
		}
		f.close(db)
		oldA, newB := f.snapshot(a), f.snapshot(b)

		f.restore(a, newB)
		f.wantValue(a, "new")
		f.wantValue(b, "new")
		replaced := f.replaced()
		if len(replaced) != 1 {
			t.Fatalf("after a Restore, files ending in .replaced: %v, want one", replaced)
		}
		kept, err := os.ReadFile(replaced[0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept, oldA) {
			t.Errorf("%s is not the database Restore replaced", replaced[0])
		}

		// An operator recovers the replaced database with Restore.
		f.restore(a, kept)
		f.wantValue(a, "old")
		if got := f.replaced(); len(got) != 1 {
			t.Errorf("after a second Restore, files ending in .replaced: %v, want one (one generation)", got)
		}

		// Into an absent actor: nothing to keep.
		c := addr("c", "c")
		f.restore(c, newB)
		f.wantValue(c, "new")
		if got := f.replaced(); len(got) != 1 {
			t.Errorf("a Restore into an absent actor kept a .replaced file: %v", got)
		}

		// Remove takes the replaced database too.
		f.remove(a)
		if got := f.replaced(); len(got) != 0 {
			t.Errorf("Remove left %v", got)
		}
	}},
	{"RestoreRefusalKeepsOld", func(t *testing.T, s suite) {
		f := s.files(t)
		a := addr("c", "a")
		f.write(a, "old")
		garbage := bytes.Repeat([]byte("not a database "), 1000)
		if err := f.drv.Restore(ctx(), f.root, a, bytes.NewReader(garbage)); err == nil {
			t.Error("Restore of garbage succeeded")
		}
		f.wantValue(a, "old")
		db := f.open(a)
		if err := f.drv.Restore(ctx(), f.root, a, bytes.NewReader(f.written(addr("c", "b"), "new"))); !errors.Is(err, storage.ErrOpen) {
			t.Errorf("Restore of an open actor: %v, want ErrOpen", err)
		}
		if got := get(t, db); got != "old" {
			t.Errorf("after a refused Restore the open database reads %q", got)
		}
		f.close(db)
		if got := f.replaced(); len(got) != 0 {
			t.Errorf("refused Restores left %v", got)
		}
	}},
	{"Sync", func(t *testing.T, s suite) {
		f := s.files(t)
		db := f.open(addr("c", "a"))
		syncer, ok := db.(storage.Syncer)
		if !ok {
			t.Skip("the driver's DB does not implement storage.Syncer (optional)")
		}
		if err := syncer.Sync(ctx()); err != nil {
			t.Errorf("Sync of a fresh database: %v", err)
		}
		put(t, db, "one")
		if err := syncer.Sync(ctx()); err != nil {
			t.Errorf("Sync after a commit: %v", err)
		}
		f.close(db)
		if err := syncer.Sync(ctx()); err == nil {
			t.Error("Sync of a closed database succeeded")
		}
		f.wantValue(addr("c", "a"), "one")
	}},
	{"NamesRoundTrip", func(t *testing.T, s suite) {
		f := s.files(t)
		long := strings.Repeat("é", 128) // 256 bytes, longer encoded than a file name may be
		names := []string{"alice", "Alice", "room 1", "room%201", "..x", ".x", "a.b", "a%2Fb", "~", "\u00e9t\u00e9",
			long, long[:254] + "e", strings.Repeat("n", 256), strings.Repeat("n", 255) + "m", "x\\y", "*?<>|:\""}
		for _, n := range names {
			f.write(addr("c", n), n)
		}
		for _, n := range names {
			f.wantExists(addr("c", n), true)
			f.wantValue(addr("c", n), n)
			f.wantExists(addr("d", n), false)
		}
		if got := f.walk("default"); !slices.Equal(got, sorted(prefixed("c/", names))) {
			t.Errorf("Walk found %q, want %q", got, sorted(prefixed("c/", names)))
		}
		f.remove(addr("c", long))
		f.wantExists(addr("c", long), false)
		f.wantExists(addr("c", long[:254]+"e"), true)
	}},
	{"WalkFindsEveryActorOfTheTenant", func(t *testing.T, s suite) {
		f := s.files(t)
		if got := f.walk("default"); len(got) != 0 {
			t.Errorf("Walk of an empty root found %q", got)
		}
		f.write(addr("c", "a"), "a")
		f.write(addr("c", "b"), "b")
		f.write(addr("d", "a"), "a")
		f.write(abi.Address{Tenant: "other", Class: "c", Name: "z"}, "z")
		f.write(addr("c", "gone"), "gone")
		f.remove(addr("c", "gone"))
		f.restore(addr("c", "b"), f.snapshot(addr("d", "a"))) // leaves a replaced database, not an actor
		want := []string{"c/a", "c/a", "d/a"}                 // class/value: c/b now holds "a"
		if got := f.walk("default"); !slices.Equal(got, want) {
			t.Errorf("Walk found %q, want %q", got, want)
		}
		if got := f.walk("other"); !slices.Equal(got, []string{"c/z"}) {
			t.Errorf("Walk of tenant other found %q", got)
		}
		stop := errors.New("stop")
		n := 0
		err := f.drv.Walk(ctx(), f.root, "default", storage.Options{}, func(storage.Found) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("Walk after fn's error: %v after %d calls, want stop after 1", err, n)
		}
		// Walk closed what it opened.
		f.close(f.open(addr("c", "a")))
	}},
}

// files is a subtest's driver and data root.
type files struct {
	t    *testing.T
	drv  storage.Driver
	root string
}

func (s suite) files(t *testing.T) *files {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	return &files{t: t, drv: s.newDriver(t), root: t.TempDir()}
}

func ctx() context.Context { return context.Background() }

func addr(class, name string) abi.Address {
	return abi.Address{Tenant: "default", Class: class, Name: name}
}

func (f *files) open(a abi.Address) storage.DB {
	f.t.Helper()
	db, err := f.drv.Open(ctx(), f.root, a, storage.Options{})
	if err != nil {
		f.t.Fatalf("Open %q: %v", a.Name, err)
	}
	f.t.Cleanup(func() { db.Close() })
	return db
}

func (f *files) close(db storage.DB) {
	f.t.Helper()
	if err := db.Close(); err != nil {
		f.t.Fatalf("Close: %v", err)
	}
}

func (f *files) remove(a abi.Address) {
	f.t.Helper()
	if err := f.drv.Remove(ctx(), f.root, a); err != nil {
		f.t.Fatalf("Remove %q: %v", a.Name, err)
	}
}

func (f *files) restore(a abi.Address, data []byte) {
	f.t.Helper()
	if err := f.drv.Restore(ctx(), f.root, a, bytes.NewReader(data)); err != nil {
		f.t.Fatalf("Restore %q: %v", a.Name, err)
	}
}

func (f *files) snapshot(a abi.Address) []byte {
	f.t.Helper()
	return snapshotOf(f.t, f.drv, f.root, a)
}

// snapshotOf is the actor's closed database, as Snapshot writes it.
func snapshotOf(t *testing.T, drv storage.Driver, root string, a abi.Address) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := drv.Snapshot(ctx(), root, a, &buf); err != nil {
		t.Fatalf("Snapshot %q: %v", a.Name, err)
	}
	return buf.Bytes()
}

// written writes v to a new actor a and returns its snapshot.
func (f *files) written(a abi.Address, v string) []byte {
	f.write(a, v)
	return f.snapshot(a)
}

// write opens a, stores v as its value and closes it.
func (f *files) write(a abi.Address, v string) {
	f.t.Helper()
	db := f.open(a)
	put(f.t, db, v)
	f.close(db)
}

func (f *files) wantValue(a abi.Address, want string) {
	f.t.Helper()
	db := f.open(a)
	if got := get(f.t, db); got != want {
		f.t.Errorf("%s/%q holds %q, want %q", a.Class, a.Name, got, want)
	}
	f.close(db)
}

func (f *files) wantExists(a abi.Address, want bool) {
	f.t.Helper()
	got, err := f.drv.Exists(ctx(), f.root, a)
	if err != nil || got != want {
		f.t.Errorf("Exists %s/%q: %v, %v; want %v", a.Class, a.Name, got, err, want)
	}
}

// walk returns class/value of every database Walk finds, sorted.
func (f *files) walk(tenant string) []string {
	f.t.Helper()
	var got []string
	err := f.drv.Walk(ctx(), f.root, tenant, storage.Options{}, func(fd storage.Found) error {
		if fd.Err != nil {
			f.t.Errorf("Walk: %s: %v", fd.Where, fd.Err)
			return nil
		}
		got = append(got, fd.Class+"/"+get(f.t, fd.DB))
		return nil
	})
	if err != nil {
		f.t.Fatalf("Walk: %v", err)
	}
	return sorted(got)
}

// filesUnder lists the regular files under the root.
func (f *files) filesUnder() []string {
	f.t.Helper()
	var out []string
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// replaced lists the files under the root whose names end in .replaced.
func (f *files) replaced() []string {
	var out []string
	for _, p := range f.filesUnder() {
		if strings.HasSuffix(p, ".replaced") {
			out = append(out, p)
		}
	}
	return out
}

// put stores v as the database's one value; get reads it ("" if none).
func put(t *testing.T, db storage.DB, v string) {
	t.Helper()
	for _, sql := range []string{"CREATE TABLE IF NOT EXISTS v (v TEXT)", "DELETE FROM v"} {
		if _, err := db.Exec(ctx(), sql, nil, storage.ExecOptions{}); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := db.Exec(ctx(), "INSERT INTO v VALUES (?)", []abi.Value{T(v)}, storage.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.EndEvent(ctx()); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, db storage.DB) string {
	t.Helper()
	var w abi.RowsWriter
	err := db.Query(ctx(), "SELECT v FROM v", nil, &w)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return ""
		}
		t.Fatalf("SELECT v: %v", err)
	}
	r := decode(t, w.Buf)
	db.EndEvent(ctx())
	if len(r.vals) == 0 {
		return ""
	}
	return string(r.one().Bytes)
}

func prefixed(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}

func sorted(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return ss
}
