package sqlitestorage

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// openReplicated opens a fresh database for replication and returns it
// with its path.
func openReplicated(t *testing.T, name string) (*db, string) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	root := t.TempDir()
	sdb, err := newDriver(t, name).Open(context.Background(), root, testAddr("r"), storage.Options{Replication: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	path, err := dbPath(root, testAddr("r"))
	if err != nil {
		t.Fatal(err)
	}
	return sdb.(*db), path
}

func mustExec(t *testing.T, d *db, sql string) {
	t.Helper()
	if _, err := d.Exec(context.Background(), sql, nil, storage.ExecOptions{}); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func captured(t *testing.T, d *db) storage.CaptureInfo {
	t.Helper()
	info, err := d.Capture(context.Background(), func(uint32, []byte) error { return nil })
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	return info
}

// The conformance rule NeverRolledBack relies on the rolled-back
// transaction's pages reaching the log before its rollback: check that
// they do, so that the rule is not vacuous.
func TestCaptureRollbackSpills(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		d, path := openReplicated(t, name)
		mustExec(t, d, "CREATE TABLE t(v)")
		captured(t, d)
		before, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.HostExec(context.Background(), "PRAGMA cache_size=5"); err != nil {
			t.Fatal(err)
		}
		mustExec(t, d, "BEGIN")
		for i := 0; i < 300; i++ {
			mustExec(t, d, "INSERT INTO t VALUES(randomblob(1000))")
		}
		after, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		if after.Size() < before.Size()+50*d.pageSize {
			t.Fatalf("the open transaction did not spill into the log (%d bytes, then %d)", before.Size(), after.Size())
		}
		if info := captured(t, d); info.Transactions != 0 || info.Changed != 0 {
			t.Errorf("a capture with spilled frames of an open transaction in the log: %d transactions, %d pages", info.Transactions, info.Changed)
		}
		mustExec(t, d, "ROLLBACK")
	})
}

// A commit whose last frame is damaged (a torn write) is not captured, nor
// anything after it; SQLite's own recovery ignores it the same way.
func TestCaptureIgnoresTornTail(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		for _, tear := range []string{"flipped", "cut"} {
			t.Run(tear, func(t *testing.T) {
				d, path := openReplicated(t, name)
				mustExec(t, d, "CREATE TABLE t(v)")
				if info := captured(t, d); info.Transactions != 1 {
					t.Fatalf("first capture: %d transactions, want 1", info.Transactions)
				}
				mustExec(t, d, "INSERT INTO t VALUES(randomblob(100))")
				fi, err := os.Stat(path + "-wal")
				if err != nil {
					t.Fatal(err)
				}
				f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				switch tear {
				case "flipped": // a byte of the last frame's page
					var b [1]byte
					if _, err := f.ReadAt(b[:], fi.Size()-100); err != nil {
						t.Fatal(err)
					}
					b[0] ^= 0xff
					if _, err := f.WriteAt(b[:], fi.Size()-100); err != nil {
						t.Fatal(err)
					}
				case "cut": // the last frame half written
					if err := f.Truncate(fi.Size() - d.pageSize/2); err != nil {
						t.Fatal(err)
					}
				}
				if info := captured(t, d); info.Transactions != 0 || info.Changed != 0 {
					t.Errorf("a capture over a torn commit: %d transactions, %d pages, want none", info.Transactions, info.Changed)
				}
			})
		}
	})
}

// A database that grows and shrinks between two captures (auto_vacuum, set up by a
// bare connection since the plugin's own refuses to change it) captures no
// page past its new size.
func TestCaptureAfterShrinking(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		root := t.TempDir()
		drv := newDriver(t, name).(*driver)
		path, err := dbPath(root, testAddr("r"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		err = drv.bare(path, func(c conn) error {
			for _, sql := range []string{"PRAGMA auto_vacuum=FULL", "CREATE TABLE t(v)"} {
				if _, err := pragmaOn(c, sql); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sdb, err := drv.Open(context.Background(), root, testAddr("r"), storage.Options{Replication: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sdb.Close()
		d := sdb.(*db)
		for range 100 {
			mustExec(t, d, "INSERT INTO t VALUES(randomblob(1000))")
		}
		// Grown past 25 pages, then shrunk, with no capture between.
		mustExec(t, d, "DELETE FROM t WHERE rowid > 5")
		var pgnos []uint32
		info, err := d.Capture(context.Background(), func(pgno uint32, _ []byte) error {
			pgnos = append(pgnos, pgno)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if info.Pages > 10 {
			t.Fatalf("the database did not shrink: %d pages", info.Pages)
		}
		for _, p := range pgnos {
			if p > info.Pages {
				t.Errorf("the capture holds page %d, past the database's %d pages", p, info.Pages)
			}
		}
	})
}
