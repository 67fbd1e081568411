package sqlitestorage

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // SQLite through database/sql, on its default VFS: another program's SQLite

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// An actor's database is opened on unix-none, which takes no locks, so the
// lock openFile takes is all that keeps another process out: while the
// database is open, a second process finds each of SQLite's lock bytes
// taken, another program's SQLite on the default VFS cannot read it (nor
// read past the connection's log or write under it), and this driver
// cannot open or remove it; once it is closed, all three can. A new
// database copied from a template is locked before it takes its path.
func TestAnotherProcessFindsAnOpenDatabaseLocked(t *testing.T) {
	if path := os.Getenv("WASMKEEP_TEST_LOCKED_DB"); path != "" {
		otherProcess(path)
		return
	}
	forEachDriver(t, func(t *testing.T, name string) {
		t.Run("statements", func(t *testing.T) { testFoundLocked(t, name, storage.Options{}) })
		template := storage.Options{Prepare: storage.Preparation{Statements: prepStatements[:2], CacheDir: t.TempDir()}}
		t.Run("template", func(t *testing.T) { testFoundLocked(t, name, template) })
	})
}

func testFoundLocked(t *testing.T, name string, opts storage.Options) {
	root := t.TempDir()
	d, err := newDriver(t, name).Open(context.Background(), root, testAddr("held"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.HostExec(context.Background(), "CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	path, _ := dbPath(root, testAddr("held"))
	other := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAnotherProcessFindsAnOpenDatabaseLocked$")
		cmd.Env = append(os.Environ(), "WASMKEEP_TEST_LOCKED_DB="+path, "WASMKEEP_TEST_LOCKED_ROOT="+root, "WASMKEEP_TEST_LOCKED_DRIVER="+name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the other process: %v\n%s", err, out)
		}
		return string(out)
	}
	out := other()
	for _, want := range []string{
		"pending byte: locked", "reserved byte: locked", "shared bytes: locked",
		"sqlite: database is locked",
		"driver: open: " + path + ": the database is locked by another process",
		"driver: remove: " + path + ": the database is locked by another process",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("while the database is open, the other process said\n%s\nwant a line with %q", out, want)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	out = other()
	for _, want := range []string{"pending byte: free", "shared bytes: free", "sqlite: read 0 rows", "driver: opened", "driver: removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("once the database is closed, the other process said\n%s\nwant a line with %q", out, want)
		}
	}
}

// otherProcess probes the lock bytes of the database at path, reads it
// with SQLite's default VFS, then opens and removes it with this driver,
// printing what each found.
func otherProcess(path string) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range []struct {
		name       string
		start, len int64
	}{{"pending byte", lockBytesStart, 1}, {"reserved byte", lockBytesStart + 1, 1}, {"shared bytes", lockBytesStart + 2, 510}} {
		lk := unix.Flock_t{Type: unix.F_RDLCK, Start: r.start, Len: r.len}
		state := "free"
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
			state = err.Error()
		} else if lk.Type != unix.F_UNLCK {
			state = "locked"
		}
		fmt.Printf("%s: %s\n", r.name, state)
	}
	f.Close()

	db, err := sql.Open("sqlite", path)
	if err == nil {
		var n int
		if err = db.QueryRow("SELECT count(*) FROM t").Scan(&n); err == nil {
			fmt.Printf("sqlite: read %d rows\n", n)
		}
		db.Close()
	}
	if err != nil {
		fmt.Printf("sqlite: %v\n", err)
	}

	cfg := NewConfig()
	cfg.Driver = os.Getenv("WASMKEEP_TEST_LOCKED_DRIVER")
	drv, err := New(cfg)
	if err != nil {
		fmt.Printf("driver: %v\n", err)
		return
	}
	ctx, root := context.Background(), os.Getenv("WASMKEEP_TEST_LOCKED_ROOT")
	if d, err := drv.Open(ctx, root, testAddr("held"), storage.Options{}); err != nil {
		fmt.Printf("driver: open: %s\n", strings.TrimPrefix(err.Error(), "open "))
	} else {
		d.Close()
		fmt.Println("driver: opened")
	}
	if err := drv.Remove(ctx, root, testAddr("held")); err != nil {
		fmt.Printf("driver: remove: %s\n", strings.TrimPrefix(err.Error(), "remove "))
	} else {
		fmt.Println("driver: removed")
	}
}

// The other way round: a database another connection holds on the default
// VFS (here in this process, whose POSIX locks an open file description
// lock conflicts with as another process's would), in a read transaction
// in WAL mode with a shared-memory index, is not opened by this driver.
func TestDatabaseLockedByAnotherSQLiteIsNotOpened(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		root := t.TempDir()
		path, _ := dbPath(root, testAddr("elsewhere"))
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		other, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := other.Exec("PRAGMA journal_mode=WAL; CREATE TABLE t (x)"); err != nil {
			t.Fatal(err)
		}
		tx, err := other.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var n int
		if err := tx.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		d, err := newDriver(t, name).Open(context.Background(), root, testAddr("elsewhere"), storage.Options{})
		if err == nil {
			d.Close()
			t.Fatal("opened a database another connection was reading")
		}
		if !strings.Contains(err.Error(), "the database is locked by another process") {
			t.Errorf("opening a database another connection was reading: %v, want it locked", err)
		}
	})
}
