package sqlitestorage

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/storagetest"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// driverNames are the drivers this build has.
func driverNames() []string { return slices.Sorted(maps.Keys(bindings)) }

// forEachDriver runs f as a subtest per driver in the build. A driver the
// build has but that refuses to run for lack of a required capability
// (go-sqlite3 without its sqlite_fts5 tag) is skipped, with the reason.
func forEachDriver(t *testing.T, f func(t *testing.T, name string)) {
	for _, name := range driverNames() {
		t.Run(name, func(t *testing.T) {
			skipRefused(t, name)
			f(t, name)
		})
	}
}

func skipRefused(t testing.TB, name string) {
	t.Helper()
	cfg := NewConfig()
	cfg.Driver = name
	var lack *lackError
	if _, err := New(cfg); errors.As(err, &lack) {
		t.Skipf("this build has driver %s but it refuses to run: %v", name, err)
	}
}

func newDriver(t testing.TB, name string) storage.Driver {
	t.Helper()
	cfg := NewConfig()
	cfg.Driver = name
	drv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

// testAddr is an actor of the tests' tenant and class.
func testAddr(name string) abi.Address {
	return abi.Address{Tenant: "default", Class: "test", Name: name}
}

func TestConformance(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		storagetest.Run(t, func(t *testing.T) storage.Driver { return newDriver(t, name) })
	})
}

func TestInfo(t *testing.T) {
	in := Info()
	if _, err := plugin.NewRegistry(in); err != nil {
		t.Fatal(err)
	}
	if err := plugin.CheckAPI(in, storage.API); err != nil {
		t.Fatal(err)
	}
	drv, err := in.New(in.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := drv.(storage.Driver); !ok {
		t.Fatalf("New returned %T, not a storage.Driver", drv)
	}
}

// The default driver is mattn exactly when this build can run it (the build
// constraint of driver_default_mattn.go against what New finds).
func TestDefaultDriver(t *testing.T) {
	cfg := NewConfig()
	cfg.Driver = "mattn"
	_, err := New(cfg)
	want := "modernc"
	if err == nil {
		want = "mattn"
	}
	if defaultDriver != want {
		t.Errorf("the default driver is %s; this build runs mattn: %v (New: %v)", defaultDriver, err == nil, err)
	}
	if _, err := New(NewConfig()); err != nil {
		t.Errorf("the default driver does not run: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Driver = "nosuch" }, `unknown driver "nosuch" (this build has: ` + strings.Join(driverNames(), ", ") + ")"},
		{func(c *Config) { c.Synchronous = "off" }, `synchronous is "off"`},
		{func(c *Config) { c.StatementCache = 0 }, "statement_cache is 0"},
	} {
		cfg := NewConfig()
		c.edit(cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error containing %q", err, c.want)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted a Config value instead of a pointer")
	}
	drv := newDriver(t, "modernc")
	if _, err := drv.Open(context.Background(), t.TempDir(), testAddr("x"), storage.Options{MaxValueBytes: -1}); err == nil {
		t.Error("Open accepted a negative limit")
	}
}

func TestBlank(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, " ;\n\t;": true, "-- c": true, "-- c\n;": true, "/* c */;": true, "/* open": true,
		"x": false, "; x": false, "-- c\nx": false, "/* c */ x": false, "- x": false,
	} {
		if got := blank(s); got != want {
			t.Errorf("blank(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestStatementCache checks that a statement pushed out of the cache is
// prepared again, and that guest and host statements never share one.
func TestStatementCache(t *testing.T) { forEachDriver(t, testStatementCache) }

func testStatementCache(t *testing.T, name string) {
	cfg := NewConfig()
	cfg.Driver = name
	cfg.StatementCache = 2
	drv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	db, err := drv.Open(context.Background(), t.TempDir(), testAddr("x"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.HostExec(ctx, "CREATE TABLE _wasmkeep_t(a)"); err != nil {
		t.Fatal(err)
	}
	const read = "SELECT count(*) FROM _wasmkeep_t"
	for range 3 {
		for _, sql := range []string{"SELECT 1", "SELECT 2", "SELECT 3"} {
			if _, err := db.Exec(ctx, sql, nil, storage.ExecOptions{}); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		var w abi.RowsWriter
		if err := db.HostQuery(ctx, read, nil, &w); err != nil {
			t.Fatalf("host %s: %v", read, err)
		}
		if _, err := db.Exec(ctx, read, nil, storage.ExecOptions{}); storage.KindOf(err) != abi.SQLNotAllowed {
			t.Fatalf("guest %s after the host ran it: %v, want not-allowed", read, err)
		}
	}
}

// TestFiles checks the files a database keeps: the log, and no shared-memory
// index (the connection holds its locks, so the index lives in its memory).
func TestFiles(t *testing.T) { forEachDriver(t, testFiles) }

func testFiles(t *testing.T, name string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	root := t.TempDir()
	db, err := newDriver(t, name).Open(context.Background(), root, testAddr("x"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(context.Background(), "CREATE TABLE t(a)", nil, storage.ExecOptions{Durable: true}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "actors", "default", "test", "x.db")
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no log: %v", err)
	}
	if _, err := os.Stat(path + "-shm"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a shared-memory index exists: %v", err)
	}
}

func benchDB(b *testing.B, name string) storage.DB {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	db, err := newDriver(b, name).Open(context.Background(), b.TempDir(), testAddr("bench"), storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, sql := range []string{"CREATE TABLE counter(id INTEGER PRIMARY KEY, v INTEGER)", "INSERT INTO counter VALUES(1, 0)"} {
		if _, err := db.Exec(ctx, sql, nil, storage.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

// benchEachDriver runs f as a sub-benchmark per driver in the build.
func benchEachDriver(b *testing.B, f func(b *testing.B, db storage.DB)) {
	for _, name := range driverNames() {
		b.Run(name, func(b *testing.B) {
			skipRefused(b, name)
			f(b, benchDB(b, name))
		})
	}
}

// BenchmarkCounterRead is one resident counter read: a SELECT by primary key
// and the end of its event.
func BenchmarkCounterRead(b *testing.B) {
	benchEachDriver(b, func(b *testing.B, db storage.DB) {
		ctx := context.Background()
		params := []abi.Value{{Kind: abi.KindInteger, Int: 1}}
		var w abi.RowsWriter
		b.ReportAllocs()
		for b.Loop() {
			w.Buf = w.Buf[:0]
			if err := db.Query(ctx, "SELECT v FROM counter WHERE id = ?", params, &w); err != nil {
				b.Fatal(err)
			}
			if err := db.EndEvent(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCounterWrite is one resident counter increment (an autocommit
// UPDATE, not fsynced) and the end of its event.
func BenchmarkCounterWrite(b *testing.B) { benchWrite(b, storage.ExecOptions{}) }

// BenchmarkCounterWriteDurable is the same increment with exec-durable.
func BenchmarkCounterWriteDurable(b *testing.B) { benchWrite(b, storage.ExecOptions{Durable: true}) }

func benchWrite(b *testing.B, opts storage.ExecOptions) {
	benchEachDriver(b, func(b *testing.B, db storage.DB) {
		ctx := context.Background()
		params := []abi.Value{{Kind: abi.KindInteger, Int: 1}}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := db.Exec(ctx, "UPDATE counter SET v = v + 1 WHERE id = ?", params, opts); err != nil {
				b.Fatal(err)
			}
			if err := db.EndEvent(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSum is one CPU-bound guest statement: a sum over a million rows
// of a recursive CTE (about 10 million virtual machine steps, so the
// progress handler and the SQL CPU watch run throughout).
func BenchmarkSum(b *testing.B) {
	benchEachDriver(b, func(b *testing.B, db storage.DB) {
		ctx := context.Background()
		var w abi.RowsWriter
		b.ReportAllocs()
		for b.Loop() {
			w.Buf = w.Buf[:0]
			if err := db.Query(ctx, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT sum(x) FROM c", nil, &w); err != nil {
				b.Fatal(err)
			}
			if err := db.EndEvent(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Each binding's memory settings (memory.go) took: SQLite refuses them,
// silently but for the result code, once anything has initialized it.
func TestMemoryConfig(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		if rc, ok := memoryConfig[name]; !ok || rc != [2]int32{} {
			t.Errorf("sqlite3_config for %s: result codes %v (set: %v), want 0 each", name, rc, ok)
		}
	})
}
