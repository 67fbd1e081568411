package sqlitestorage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// prepStatements are what the kernel prepares new databases with (its host
// tables), and a pragma that writes the header.
var prepStatements = []string{
	"CREATE TABLE IF NOT EXISTS _wasmkeep_meta (key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID",
	"CREATE TABLE IF NOT EXISTS _wasmkeep_alarm (id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL, failures INTEGER NOT NULL)",
	"PRAGMA user_version = 7",
}

// nameRow is a per-actor host write, the row the kernel's first set-alarm
// writes, so that each database made here has been written after Open.
func nameRow(t *testing.T, d storage.DB, name string) {
	t.Helper()
	if _, err := d.HostExec(context.Background(), "INSERT OR IGNORE INTO _wasmkeep_meta (key, value) VALUES ('name', ?)",
		abi.Value{Kind: abi.KindText, Bytes: []byte(name)}); err != nil {
		t.Fatal(err)
	}
}

// openNew opens addr under root with opts, runs the kernel's statements
// after it, as the kernel does whatever the driver did, and the name row.
func openNew(t *testing.T, drv storage.Driver, root string, addr abi.Address, opts storage.Options, stmts []string) storage.DB {
	t.Helper()
	d, err := drv.Open(context.Background(), root, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range stmts {
		if _, err := d.HostExec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	nameRow(t, d, addr.Name)
	return d
}

// describe is what a database holds and how it is set up, read on a bare
// connection.
func describe(t *testing.T, drv *driver, path string) string {
	t.Helper()
	var out strings.Builder
	err := drv.bare(path, func(c conn) error {
		for _, q := range []string{
			"SELECT group_concat(type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, ''), '; ') FROM (SELECT * FROM sqlite_schema ORDER BY name)",
			"PRAGMA journal_mode", "PRAGMA page_size", "PRAGMA user_version", "PRAGMA application_id",
			"PRAGMA page_count", "PRAGMA freelist_count", "PRAGMA encoding", "PRAGMA auto_vacuum",
			"SELECT group_concat(key || '=' || value, ',') FROM _wasmkeep_meta",
			"SELECT count(*) FROM _wasmkeep_alarm", "PRAGMA quick_check",
		} {
			v, err := pragmaOn(c, q)
			if err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			fmt.Fprintf(&out, "%s: %s %d\n", q, v.Bytes, v.Int)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out.String()
}

func templateFiles(t *testing.T, cache string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, templateDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func (drv *driver) templateBuilds() int {
	drv.tpl.mu.Lock()
	defer drv.tpl.mu.Unlock()
	return drv.tpl.builds
}

// TestTemplateSameAsStatements: a database copied from the template holds
// what one built by the statements does, byte for byte once both are
// closed (their logs checkpointed), and its first capture for replication
// is the same.
func TestTemplateSameAsStatements(t *testing.T) { forEachDriver(t, testTemplateSameAsStatements) }

func testTemplateSameAsStatements(t *testing.T, name string) {
	drv := newDriver(t, name).(*driver)
	cache, viaTemplate, viaStatements := t.TempDir(), t.TempDir(), t.TempDir()
	prep := storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}
	for i, actor := range []string{"a", "b"} {
		addr := testAddr(actor)
		// The kernel runs its statements again after Open, which for its
		// CREATE ... IF NOT EXISTS changes nothing (a pragma that sets
		// user_version would rewrite page 1).
		d := openNew(t, drv, viaTemplate, addr, prep, prepStatements[:2])
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if got := drv.templateBuilds(); got != 1 {
			t.Fatalf("after %d new databases, %d templates made, want 1", i+1, got)
		}
		d = openNew(t, drv, viaStatements, addr, storage.Options{}, prepStatements)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		tp, _ := dbPath(viaTemplate, addr)
		sp, _ := dbPath(viaStatements, addr)
		got, want := describe(t, drv, tp), describe(t, drv, sp)
		if got != want {
			t.Fatalf("from the template:\n%s\nby statements:\n%s", got, want)
		}
		if !strings.Contains(got, "PRAGMA journal_mode: wal") || !strings.Contains(got, "PRAGMA user_version:  7") || !strings.Contains(got, "name="+actor) {
			t.Fatalf("not what the statements make:\n%s", got)
		}
		tb, err := os.ReadFile(tp)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := os.ReadFile(sp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tb, sb) {
			for i := range tb {
				if tb[i] != sb[i] {
					t.Logf("byte %d: %d, %d", i, tb[i], sb[i])
				}
			}
			t.Fatalf("the files differ: %d and %d bytes", len(tb), len(sb))
		}
	}
	if files := templateFiles(t, cache); len(files) != 1 || !strings.HasSuffix(files[0], templateSuffix) {
		t.Fatalf("cache holds %q, want one template", files)
	}

	// Opened for replication, the first capture (a first segment) is the
	// same page for page.
	first := func(root string, opts storage.Options) (storage.CaptureInfo, map[uint32][]byte) {
		opts.Replication = true
		stmts := prepStatements
		if len(opts.Prepare.Statements) > 0 {
			stmts = stmts[:2]
		}
		d := openNew(t, drv, root, testAddr("r"), opts, stmts)
		defer d.Close()
		pages := map[uint32][]byte{}
		info, err := d.CaptureAll(context.Background(), func(pgno uint32, data []byte) error {
			pages[pgno] = bytes.Clone(data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return info, pages
	}
	ti, tp := first(viaTemplate, prep)
	si, sp := first(viaStatements, storage.Options{})
	if ti.Transactions == 0 || ti.Pages != si.Pages || len(tp) != len(sp) {
		t.Fatalf("first capture from the template %+v (%d pages), by statements %+v (%d pages)", ti, len(tp), si, len(sp))
	}
	for pgno, data := range sp {
		if !bytes.Equal(tp[pgno], data) {
			t.Fatalf("page %d of the first capture differs", pgno)
		}
	}
}

// TestTemplateNotForExisting: a database Open finds is left as it is, and a
// driver reading the cache in a later start makes no template.
func TestTemplateNotForExisting(t *testing.T) { forEachDriver(t, testTemplateNotForExisting) }

func testTemplateNotForExisting(t *testing.T, name string) {
	root, cache := t.TempDir(), t.TempDir()
	d := openNew(t, newDriver(t, name), root, testAddr("old"), storage.Options{}, prepStatements[:1])
	d.Close()
	drv := newDriver(t, name).(*driver)
	prep := storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}
	d, err := drv.Open(context.Background(), root, testAddr("old"), prep)
	if err != nil {
		t.Fatal(err)
	}
	var w abi.RowsWriter
	if err := d.HostQuery(context.Background(), "SELECT count(*) FROM sqlite_schema", nil, &w); err != nil {
		t.Fatal(err)
	}
	d.Close()
	r := abi.NewReader(w.Buf)
	r.Columns()
	if r.Value().Int != 1 {
		t.Fatal("the statements ran on a database Open found")
	}
	if drv.templateBuilds() != 0 || len(templateFiles(t, cache)) != 0 {
		t.Fatal("a template was made for a database Open found")
	}
	openNew(t, drv, root, testAddr("new"), prep, nil).Close()
	again := newDriver(t, name).(*driver) // a later start
	openNew(t, again, root, testAddr("newer"), prep, nil).Close()
	if drv.templateBuilds() != 1 || again.templateBuilds() != 0 {
		t.Fatalf("templates made: %d, then %d in a later start; want 1, then 0", drv.templateBuilds(), again.templateBuilds())
	}
}

// TestTemplateStale: other statements (or another SQLite) make another
// template; the old one is not used for them.
func TestTemplateStale(t *testing.T) { forEachDriver(t, testTemplateStale) }

func testTemplateStale(t *testing.T, name string) {
	root, cache := t.TempDir(), t.TempDir()
	drv := newDriver(t, name).(*driver)
	openNew(t, drv, root, testAddr("a"), storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}, nil).Close()
	changed := append(prepStatements[:2:2], "CREATE TABLE IF NOT EXISTS _wasmkeep_more (x)")
	drv = newDriver(t, name).(*driver)
	openNew(t, drv, root, testAddr("b"), storage.Options{Prepare: storage.Preparation{Statements: changed, CacheDir: cache}}, nil).Close()
	if drv.templateBuilds() != 1 || len(templateFiles(t, cache)) != 2 {
		t.Fatalf("after the statements changed: %d templates made, cache %q", drv.templateBuilds(), templateFiles(t, cache))
	}
	path, _ := dbPath(root, testAddr("b"))
	got := describe(t, drv, path)
	if !strings.Contains(got, "_wasmkeep_more") || !strings.Contains(got, "user_version:  0") {
		t.Fatalf("the database was made from the old template:\n%s", got)
	}
}

// TestTemplateDamaged: a template file that is not whole, not this
// preparation's or not a database is made again, never copied.
func TestTemplateDamaged(t *testing.T) { forEachDriver(t, testTemplateDamaged) }

func testTemplateDamaged(t *testing.T, name string) {
	cache := t.TempDir()
	prep := storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}
	openNew(t, newDriver(t, name), t.TempDir(), testAddr("a"), prep, nil).Close()
	files := templateFiles(t, cache)
	if len(files) != 1 {
		t.Fatalf("cache holds %q", files)
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	header := len(templateMagic) + 2*65 // the key's line and the checksum's
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x55
		return b
	}
	// A template whose checksum matches a database that is not in WAL mode.
	notWAL := func() []byte {
		b := bytes.Clone(good)
		db := b[header:]
		db[18], db[19] = 1, 1
		sum := sha256Hex(db)
		return append(append([]byte(nil), b[:header-65]...), append([]byte(sum+"\n"), db...)...)
	}
	for what, data := range map[string][]byte{
		"a page flipped":      flip(header + 4096 + 100),
		"the header flipped":  flip(header + 20),
		"the key flipped":     flip(len(templateMagic) + 3),
		"the checksum":        flip(header - 10),
		"truncated":           good[:len(good)-4096],
		"empty":               {},
		"not a template":      []byte("SQLite format 3\x00 and more"),
		"a database not WAL":  notWAL(),
		"only the database":   good[header:],
		"another key's entry": bytes.Replace(good, []byte(filepath.Base(files[0])[:64]), bytes.Repeat([]byte("0"), 64), 1),
	} {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			if err := os.WriteFile(files[0], data, 0o640); err != nil {
				t.Fatal(err)
			}
			drv := newDriver(t, name).(*driver)
			root := t.TempDir()
			openNew(t, drv, root, testAddr("b"), prep, nil).Close()
			if drv.templateBuilds() != 1 {
				t.Fatal("the damaged template was used")
			}
			path, _ := dbPath(root, testAddr("b"))
			if got := describe(t, drv, path); !strings.Contains(got, "quick_check: ok") || !strings.Contains(got, "user_version:  7") {
				t.Fatalf("the new database:\n%s", got)
			}
			if again, err := os.ReadFile(files[0]); err != nil || !bytes.Equal(again, good) {
				t.Fatalf("the template was not made again (%v)", err)
			}
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the process's minor page faults so far.
func minorFaults(b testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Minflt
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestTemplateConcurrent: the first new databases of a preparation, opened
// at once, make one template.
func TestTemplateConcurrent(t *testing.T) { forEachDriver(t, testTemplateConcurrent) }

func testTemplateConcurrent(t *testing.T, name string) {
	drv := newDriver(t, name).(*driver)
	root, cache := t.TempDir(), t.TempDir()
	prep := storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			d, err := drv.Open(context.Background(), root, testAddr(fmt.Sprint("actor", i)), prep)
			if err == nil {
				err = d.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, files := drv.templateBuilds(), templateFiles(t, cache); n != 1 || len(files) != 1 {
		t.Fatalf("%d templates made, cache holds %q; want one", n, files)
	}
	for i := range 8 {
		path, _ := dbPath(root, testAddr(fmt.Sprint("actor", i)))
		if got := describe(t, drv, path); !strings.Contains(got, "user_version:  7") {
			t.Fatalf("actor%d:\n%s", i, got)
		}
	}
}

// TestTemplateWithoutCache: without a cache directory the statements run on
// each new database.
func TestTemplateWithoutCache(t *testing.T) { forEachDriver(t, testTemplateWithoutCache) }

func testTemplateWithoutCache(t *testing.T, name string) {
	drv := newDriver(t, name).(*driver)
	root := t.TempDir()
	openNew(t, drv, root, testAddr("a"), storage.Options{Prepare: storage.Preparation{Statements: prepStatements}}, nil).Close()
	path, _ := dbPath(root, testAddr("a"))
	if got := describe(t, drv, path); !strings.Contains(got, "user_version:  7") || drv.templateBuilds() != 0 {
		t.Fatalf("%d templates made; the database:\n%s", drv.templateBuilds(), got)
	}
}

// BenchmarkNewDatabase is what a new actor's database costs the kernel:
// Open, its host statements (no-ops on a copy of the template), a first
// write (the name row, as a guest's first write would be); by statements
// (no preparation) and from the template, closed at once (its memory
// reused by the next), and from the template, kept open as a new resident
// actor's is ("resident": each one's memory new pages, first touched by
// it). minflt/op counts the process's page faults, and the pages the
// kernel populated (prefault.go) among them.
func BenchmarkNewDatabase(b *testing.B) {
	for _, name := range driverNames() {
		b.Run(name, func(b *testing.B) {
			skipRefused(b, name)
			drv := newDriver(b, name)
			cache := b.TempDir()
			template := storage.Options{Prepare: storage.Preparation{Statements: prepStatements[:2], CacheDir: cache}}
			for _, way := range []struct {
				name     string
				opts     storage.Options
				resident bool
			}{
				{"statements", storage.Options{}, false},
				{"template", template, false},
				{"resident", template, true},
			} {
				b.Run(way.name, func(b *testing.B) {
					root := b.TempDir()
					ctx := context.Background()
					name := abi.Value{Kind: abi.KindText, Bytes: []byte("x")}
					var open []storage.DB
					defer func() {
						for _, d := range open {
							d.Close()
						}
					}()
					i := 0
					cpu0, faults0 := processCPU(b), minorFaults(b)
					for b.Loop() {
						i++
						d, err := drv.Open(ctx, root, testAddr(fmt.Sprint("a", i)), way.opts)
						if err != nil {
							b.Fatal(err)
						}
						for _, sql := range prepStatements[:2] {
							if _, err := d.HostExec(ctx, sql); err != nil {
								b.Fatal(err)
							}
						}
						if _, err := d.HostExec(ctx, "INSERT OR IGNORE INTO _wasmkeep_meta (key, value) VALUES ('name', ?)", name); err != nil {
							b.Fatal(err)
						}
						if way.resident {
							open = append(open, d)
							continue
						}
						b.StopTimer()
						if err := d.Close(); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					// Close's CPU included: the checkpoint of what each
					// way wrote.
					b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
					b.ReportMetric(float64(minorFaults(b)-faults0)/float64(b.N), "minflt/op")
				})
			}
		})
	}
}

// TestTemplateIgnoresLeftLog: a log left where a database was removed by
// hand (without Remove, which removes the log first) is not replayed into
// the new database copied there, nor into one the statements build (no
// cache directory, so no template): either says Open created it
// (storage.Created), so nothing else may be in it.
func TestTemplateIgnoresLeftLog(t *testing.T) { forEachDriver(t, testTemplateIgnoresLeftLog) }

func testTemplateIgnoresLeftLog(t *testing.T, name string) {
	for _, cache := range []string{t.TempDir(), ""} {
		drv := newDriver(t, name).(*driver)
		root := t.TempDir()
		prep := storage.Options{Prepare: storage.Preparation{Statements: prepStatements, CacheDir: cache}}
		// A database opened for replication keeps its log when it closes.
		opts := prep
		opts.Replication = true
		d := openNew(t, drv, root, testAddr("gone"), opts, nil)
		if _, err := d.HostExec(context.Background(), "CREATE TABLE left_behind (x)"); err != nil {
			t.Fatal(err)
		}
		d.Close()
		gone, _ := dbPath(root, testAddr("gone"))
		if err := os.Remove(gone); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(gone + "-wal"); err != nil {
			t.Fatalf("no log was left: %v", err)
		}
		openNew(t, drv, root, testAddr("gone"), prep, nil).Close()
		if got := describe(t, drv, gone); strings.Contains(got, "left_behind") || !strings.Contains(got, "quick_check: ok") {
			t.Fatalf("the new database (cache directory %q):\n%s", cache, got)
		}
	}
}

// TestCreateFindsWhatAppeared: a database another process made at the
// path after create found none (a second server on this data directory)
// is found: the template's copy takes the path only if nothing is there,
// and leaves the other's log alone; the statements' way takes a file with
// data in it as found. Neither leaves a file of its own behind.
func TestCreateFindsWhatAppeared(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	for _, f := range []string{path, path + "-wal"} {
		if err := os.WriteFile(f, []byte(f), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	template := []byte("a template")
	if m, err := copyTemplate(path, template); err != nil || m.created || m.lockFD != -1 {
		t.Fatalf("copyTemplate over a file: %+v, %v; want it found", m, err)
	}
	for _, f := range []string{path, path + "-wal"} {
		if got, _ := os.ReadFile(f); string(got) != f {
			t.Errorf("copyTemplate over a file changed %s: it holds %q", filepath.Base(f), got)
		}
	}
	m, err := createEmpty(path)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(m.lockFD)
	if m.created || m.run {
		t.Errorf("createEmpty on a file with data: %+v, want it found", m)
	}

	fresh := filepath.Join(dir, "b.db")
	if err := os.WriteFile(fresh+"-wal", []byte("a log left behind"), 0o640); err != nil {
		t.Fatal(err)
	}
	if m, err = copyTemplate(fresh, template); err != nil || !m.created {
		t.Fatalf("copyTemplate on no file: %+v, %v", m, err)
	}
	unix.Close(m.lockFD)
	if got, _ := os.ReadFile(fresh); !bytes.Equal(got, template) {
		t.Errorf("the copy holds %q", got)
	}
	if _, err := os.Lstat(fresh + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the log left beside the new copy is still there: %v", err)
	}
	if m, err = createEmpty(filepath.Join(dir, "c.db")); err != nil {
		t.Fatal(err)
	}
	unix.Close(m.lockFD)
	if !m.created || !m.run {
		t.Errorf("createEmpty on no file: %+v, want it created, the statements to run", m)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := "a.db a.db-wal b.db c.db"; strings.Join(names, " ") != want {
		t.Errorf("the directory holds %q, want %q", strings.Join(names, " "), want)
	}
}

// TestCreatedSaysSo: a database Open made, from the template or by the
// statements (no cache directory), says so (storage.Created); one Open
// found, and one a Restore wrote, do not.
func TestCreatedSaysSo(t *testing.T) { forEachDriver(t, testCreatedSaysSo) }

func testCreatedSaysSo(t *testing.T, name string) {
	drv := newDriver(t, name)
	ctx := context.Background()
	for _, cache := range []string{t.TempDir(), ""} {
		root := t.TempDir()
		opts := storage.Options{Prepare: storage.Preparation{Statements: prepStatements[:2], CacheDir: cache}}
		created := func(a string) bool {
			t.Helper()
			d, err := drv.Open(ctx, root, testAddr(a), opts)
			if err != nil {
				t.Fatal(err)
			}
			nameRow(t, d, a)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			return storage.CreatedByOpen(d)
		}
		if !created("a") {
			t.Errorf("cache directory %q: a new database does not say Open created it", cache)
		}
		if created("a") {
			t.Errorf("cache directory %q: a database Open found says Open created it", cache)
		}
		path, _ := dbPath(root, testAddr("a"))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := drv.Restore(ctx, root, testAddr("b"), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if created("b") {
			t.Errorf("cache directory %q: a database Restore wrote says Open created it", cache)
		}
	}
}
