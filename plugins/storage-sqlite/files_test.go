package sqlitestorage

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// TestFileNames checks the names on disk: those the kernel gave before
// storage/v2, so that existing data directories keep working.
func TestFileNames(t *testing.T) {
	long := strings.Repeat("é", 128)
	for name, want := range map[string]string{
		"alice":    "alice.db",
		"room 1":   "room%201.db",
		"room%201": "room%25201.db",
		"..x":      "%2E%2Ex.db",
		"a_b-c":    "a_b-c.db",
		long:       strings.Repeat("%C3%A9", 20) + "~e42dd264fd5cf1bc947505b995dceb9a.db", // 120 bytes, ~, the first half of the name's SHA-256
	} {
		got := fileName(name)
		if got != want {
			t.Errorf("fileName(%q) = %q, want %q", name, got, want)
		}
		if strings.ContainsAny(strings.TrimSuffix(got, ".db"), "/.") || len(got) > 255 {
			t.Errorf("%q: unsafe file name %q", name, got)
		}
	}
	if fileName(long) == fileName(long[:254]+"e") {
		t.Error("two long names with one prefix share a file")
	}
	for _, bad := range []abi.Address{{Tenant: "default", Class: "..", Name: "a"}, {Tenant: "a/b", Class: "c", Name: "a"}, {Tenant: "default", Class: "c"}} {
		if _, err := dbPath("/data", bad); err == nil {
			t.Errorf("dbPath accepted %+v", bad)
		}
	}
	if p, _ := dbPath("/data", abi.Address{Tenant: "default", Class: "chat", Name: "room 1"}); p != "/data/actors/default/chat/room%201.db" {
		t.Errorf("dbPath = %s", p)
	}
}

// TestRestoreKeepsReplaced checks the name of the database a Restore keeps.
func TestRestoreKeepsReplaced(t *testing.T) { forEachDriver(t, testRestoreKeepsReplaced) }

func testRestoreKeepsReplaced(t *testing.T, name string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, drv, root := context.Background(), newDriver(t, name), t.TempDir()
	a := testAddr("a b")
	for range 2 {
		db, err := drv.Open(ctx, root, a, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		f, err := os.Open(filepath.Join(root, "actors", "default", "test", "a%20b.db"))
		if err != nil {
			t.Fatal(err)
		}
		err = drv.Restore(ctx, root, a, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "actors", "default", "test"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a%20b.db a%20b.db.replaced" {
		t.Errorf("files after two Restores: %q", names)
	}
}

// TestWalkReportsDamage checks that Walk passes on a database it cannot
// open, and goes on.
func TestWalkReportsDamage(t *testing.T) { forEachDriver(t, testWalkReportsDamage) }

func testWalkReportsDamage(t *testing.T, name string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, drv, root := context.Background(), newDriver(t, name), t.TempDir()
	for _, n := range []string{"a", "b"} {
		db, err := drv.Open(ctx, root, testAddr(n), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	bad := filepath.Join(root, "actors", "default", "test", "a.db")
	if err := os.WriteFile(bad, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	var opened, failed []string
	err := drv.Walk(ctx, root, "default", storage.Options{}, func(f storage.Found) error {
		if f.Err != nil {
			failed = append(failed, f.Where)
		} else {
			opened = append(opened, f.Where)
		}
		return nil
	})
	if err != nil || len(failed) != 1 || failed[0] != bad || len(opened) != 1 {
		t.Errorf("Walk: %v; failed %q, opened %q; want %s failed and one opened", err, failed, opened, bad)
	}
}
