package sqlitestorage

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // SQLite through database/sql, on its default VFS: another program's SQLite

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// An actor's database is opened on unix-none, which takes no locks, so the
// lock openFile takes is all that keeps another process out: while the
// database is open, a second process finds it locked, both another
// program's SQLite on the default VFS (it must not read or write around the
// connection) and this driver; once it is closed, both open it.
func TestAnotherProcessFindsAnOpenDatabaseLocked(t *testing.T) {
	if path := os.Getenv("WASMKEEP_TEST_LOCKED_DB"); path != "" {
		otherProcess(path)
		return
	}
	forEachDriver(t, func(t *testing.T, name string) {
		root := t.TempDir()
		d, err := newDriver(t, name).Open(context.Background(), root, testAddr("held"), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.HostExec(context.Background(), "CREATE TABLE t (x)"); err != nil {
			t.Fatal(err)
		}
		path, _ := dbPath(root, testAddr("held"))
		other := func() string {
			cmd := exec.Command(os.Args[0], "-test.run=^TestAnotherProcessFindsAnOpenDatabaseLocked$")
			cmd.Env = append(os.Environ(), "WASMKEEP_TEST_LOCKED_DB="+path, "WASMKEEP_TEST_LOCKED_ROOT="+root)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the other process: %v\n%s", err, out)
			}
			return string(out)
		}
		out := other()
		for _, want := range []string{"sqlite: database is locked", "driver: " + path + ": another process holds the database's lock"} {
			if !strings.Contains(out, want) {
				t.Errorf("while the database is open, the other process said\n%s\nwant a line with %q", out, want)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if out := other(); !strings.Contains(out, "sqlite: read 0 rows") || !strings.Contains(out, "driver: opened") {
			t.Errorf("once the database is closed, the other process said\n%s", out)
		}
	})
}

// otherProcess reads the database at path with SQLite's default VFS and
// then opens it with this driver, printing what each did.
func otherProcess(path string) {
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
	drv, err := New(NewConfig())
	if err != nil {
		fmt.Printf("driver: %v\n", err)
		return
	}
	d, err := drv.Open(context.Background(), os.Getenv("WASMKEEP_TEST_LOCKED_ROOT"), testAddr("held"), storage.Options{})
	if err != nil {
		fmt.Printf("driver: %s: %s\n", path, strings.TrimPrefix(err.Error(), "open "+path+": "))
		return
	}
	d.Close()
	fmt.Println("driver: opened")
}
