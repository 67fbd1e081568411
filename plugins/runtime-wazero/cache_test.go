package wazeroruntime

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/runtimetest"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// addModule exports add(a, b) = a + b: code that must run as compiled.
var addModule = binaryModule(
	sec(wasmbin.TypeSection, 1, 0x60, 2, 0x7f, 0x7f, 1, 0x7f),
	sec(wasmbin.FunctionSection, 1, 0),
	sec(wasmbin.ExportSection, 1, 3, 'a', 'd', 'd', kindFunc, 0),
	sec(wasmbin.CodeSection, 1, 7, 0, 0x20, 0, 0x20, 1, 0x6a, 0x0b),
)

// addInCache compiles addModule on an engine of its own over cacheDir and
// checks that it adds; it returns the engine, closed by the test's end.
func addInCache(t *testing.T, cacheDir string) runtime.Engine {
	t.Helper()
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(t.Context()) })
	m, err := e.Compile(t.Context(), addModule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(t.Context()) })
	in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(t.Context())
	stack := []uint64{40, 2}
	if err := in.Function("add").Call(t.Context(), stack); err != nil {
		t.Fatal(err)
	}
	if stack[0] != 42 {
		t.Fatalf("add(40, 2) = %d from the cache, want 42", stack[0])
	}
	return e
}

// damageEntry compiles addModule into a new cache, rewrites the one entry
// there with damage, and returns the cache and what it wrote.
func damageEntry(t *testing.T, damage func([]byte) []byte) (cacheDir string, damaged []byte) {
	t.Helper()
	cacheDir = t.TempDir()
	addInCache(t, cacheDir)
	entries, err := filepath.Glob(filepath.Join(cacheDir, "wazero-*", "wazero-*", "*"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the cache holds %v (%v), want one entry", entries, err)
	}
	b, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	damaged = damage(b)
	if err := os.WriteFile(entries[0], damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	return cacheDir, damaged
}

// Code loaded from the compile cache is the file's pages, mapped, not a
// copy (the patch in third_party/wazero); code compiled afresh is not.
func TestCachedCodeMappedFromItsFile(t *testing.T) {
	cacheDir := t.TempDir()
	addInCache(t, cacheDir)
	if runtimetest.CodeMappedFrom(t, cacheDir) {
		t.Fatal("code compiled afresh is mapped from the cache's file")
	}
	addInCache(t, cacheDir)
	if !runtimetest.CodeMappedFrom(t, cacheDir) {
		t.Error("code loaded from the cache is not mapped from its file")
	}
}

// A cache entry whose code changed (its checksum differs; the conformance
// suite damages whole files) is not run but compiled afresh, and written
// again.
func TestChangedCachedCodeNotRun(t *testing.T) {
	cacheDir, damaged := damageEntry(t, func(b []byte) []byte {
		b[64<<10] ^= 0xff // this module's header is short: its code starts at 64 KiB
		return b
	})
	addInCache(t, cacheDir)
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "wazero-*", "wazero-*", "*"))
	for _, entry := range entries {
		if now, err := os.ReadFile(entry); err != nil || bytes.Equal(now, damaged) {
			t.Errorf("the changed entry is still there (%v)", err)
		}
	}
}

// A cache entry cut short after its code (in its checksum or the tables
// after it) maps the code and then fails to load: the mapping goes with it,
// not kept for the process's life over a file the retry removed.
func TestEntryCutAfterItsCodeLeavesNoMapping(t *testing.T) {
	for _, cut := range []int{2, 7} { // in the catch table (stale); in the checksum (an error)
		cacheDir, _ := damageEntry(t, func(b []byte) []byte { return b[:len(b)-cut] })
		addInCache(t, cacheDir)
		if runtimetest.CodeMappedFrom(t, cacheDir) {
			t.Errorf("cut by %d bytes: code of the damaged entry is still mapped", cut)
		}
	}
}
