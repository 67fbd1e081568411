package wazeroruntime

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/wasmkeep/conformance/runtimetest"
	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

func newDriver(t testing.TB, compiler bool) runtime.Driver {
	return newTieredDriver(t, Config{Compiler: compiler, Tiering: runtime.TieringOff})
}

func newTieredDriver(t testing.TB, c Config) runtime.Driver {
	d, err := Info().New(&c)
	if err != nil {
		t.Fatal(err)
	}
	return d.(runtime.Driver)
}

// The suite passes on the compiler alone (tiering: off), on the interpreter
// alone (tiering: fast, and compiler: false), and with both tiers (on:
// modules start on the interpreter and switch to compiled code; auto: the
// large ones do, the suite's Go guest among them).
func TestConformance(t *testing.T) {
	for name, c := range map[string]Config{
		"compiler":    {Compiler: true, Tiering: runtime.TieringOff},
		"tiered":      {Compiler: true, Tiering: runtime.TieringOn},
		"auto":        {Compiler: true, Tiering: runtime.TieringAuto},
		"fast":        {Compiler: true, Tiering: runtime.TieringFast},
		"interpreter": {Compiler: false, Tiering: runtime.TieringAuto},
	} {
		t.Run(name, func(t *testing.T) {
			runtimetest.Run(t, func(t *testing.T) runtime.Driver { return newTieredDriver(t, c) })
		})
	}
}

func BenchmarkEngine(b *testing.B) {
	runtimetest.Benchmark(b, newDriver(b, true))
}

func TestInfo(t *testing.T) {
	in := Info()
	if in.Kind != plugin.Runtime || in.Name != "wazero" || in.API != runtime.API {
		t.Errorf("Info() = %s %s, want runtime.wazero %s", in.ID(), in.API, runtime.API)
	}
	if _, err := plugin.NewRegistry(in); err != nil {
		t.Error(err)
	}
	if c, ok := in.NewConfig().(*Config); !ok || !c.Compiler || c.Tiering != runtime.TieringOff {
		t.Errorf("NewConfig() = %#v, want *Config with the compiler on and tiering off", in.NewConfig())
	}
	if _, err := in.New(&Config{Compiler: true, Tiering: "sometimes"}); err == nil {
		t.Error("New accepted tiering: sometimes")
	}
	if _, err := in.New(Config{}); err == nil {
		t.Error("New accepted a Config value instead of a pointer")
	}
}

// A test binary reports no wazero version ("dev" to wazero), so its compiled
// code goes under a directory named after the executable.
func TestCacheDirOfUnversionedBuild(t *testing.T) {
	root := t.TempDir()
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, CacheDir: root})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	m, err := e.Compile(t.Context(), binaryModule(voidFunc()...))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	id, err := executableID()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := filepath.Glob(filepath.Join(root, "wazero-build-"+id, "wazero-*", "*"))
	if err != nil || len(entries) == 0 {
		t.Errorf("no compiled code under %s (%v)", root, err)
	}
}

// An engine's start removes the cached code no start wrote for a week and
// the folders of other builds unused as long (cacheprune); an engine
// running on a folder another build's start removed makes it again (the
// compile that finds it gone keeps its code in memory only).
func TestCachePruned(t *testing.T) {
	root := t.TempDir()
	start := func() runtime.Engine {
		e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, CacheDir: root})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		return e
	}
	compile := func(e runtime.Engine, wasm []byte) {
		m, err := e.Compile(t.Context(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		m.Close(t.Context())
	}
	running := start()
	compile(running, binaryModule(voidFunc()...))
	current := running.(*engine).cacheDir
	entries := filepath.Join(current, "wazero-*", "*")
	old, _ := filepath.Glob(entries)
	if len(old) != 1 {
		t.Fatalf("the cache holds %v, want one entry", old)
	}
	oldBuild := filepath.Join(root, "wazero-v1.11.0", "wazero-v1.11.0-amd64-linux", "entry")
	otherBuild := filepath.Join(root, "wazero-build-other", "wazero-dev-amd64-linux", "entry")
	for _, path := range []string{oldBuild, otherBuild} {
		os.MkdirAll(filepath.Dir(path), 0o700)
		os.WriteFile(path, nil, 0o600)
	}
	week := time.Now().Add(-cacheprune.Unused - time.Hour)
	// All of this build's folder is stale too: only being this build's
	// keeps it.
	stale := []string{old[0], filepath.Dir(old[0]), current, oldBuild, filepath.Dir(oldBuild), filepath.Dir(filepath.Dir(oldBuild))}
	for _, path := range stale {
		if err := os.Chtimes(path, week, week); err != nil {
			t.Fatal(err)
		}
	}

	start()
	if exists(old[0]) {
		t.Errorf("the stale entry %s is still there", old[0])
	}
	if exists(filepath.Dir(filepath.Dir(oldBuild))) {
		t.Error("the stale folder of another build is still there")
	}
	if !exists(otherBuild) {
		t.Error("another build's fresh entry was removed")
	}
	// A week on, another build's start removes this build's folder: the
	// running engine makes it again.
	cacheprune.Prune(root, "wazero", "", time.Now().Add(2*cacheprune.Unused))
	if exists(current) {
		t.Fatal("this build's folder, unused for two weeks, was not removed")
	}
	compile(running, binaryModule(voidFunc(1, 0x7f)...)) // in memory only
	compile(running, binaryModule(voidFunc(2, 0x7f)...))
	if now, _ := filepath.Glob(entries); len(now) != 1 {
		t.Errorf("the running engine kept %v, want one entry", now)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// prepare never panics, and what it returns for a module wazero accepts is
// accepted too.
func FuzzPrepare(f *testing.F) {
	f.Add(wasmbin.Header)
	f.Add(binaryModule(voidFunc()...))
	f.Add(binaryModule(tableGuest(1, -1)...))
	f.Add(binaryModule(sec(wasmbin.DataSection, 0xff, 0xff, 0xff, 0xff, 0x0f)))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		p, err := prepare(wasm, maxPages)
		if err != nil {
			return
		}
		if cm, err := rt.CompileModule(ctx, wasm); err == nil {
			cm.Close(ctx)
			cm, err := rt.CompileModule(ctx, p.wasm)
			if err != nil {
				t.Fatalf("wazero accepts the module but not its instrumented form: %v", err)
			}
			cm.Close(ctx)
		}
	})
}

// binaryModule assembles a module from its sections.
func binaryModule(sections ...[]byte) []byte {
	out := append([]byte(nil), wasmbin.Header...)
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

func sec(id byte, payload ...byte) []byte { return wasmbin.AppendSection(nil, id, payload) }

// voidFunc is the sections of a module with one function, () -> (), which
// declares locals (count, type) and does nothing.
func voidFunc(locals ...uint32) [][]byte {
	code := wasmbin.AppendU32(nil, uint32(len(locals)/2))
	for _, l := range locals {
		code = wasmbin.AppendU32(code, l)
	}
	code = append(code, 0x0b)
	return [][]byte{
		sec(wasmbin.TypeSection, 1, 0x60, 0, 0),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.CodeSection, append(wasmbin.AppendU32([]byte{1}, uint32(len(code))), code...)...),
	}
}

// tableGuest is the sections of a module with a funcref table of min
// elements and max (none if < 0), exporting grow(n) -> table.grow(null, n).
func tableGuest(min uint32, max int64) [][]byte {
	limits := wasmbin.AppendU32([]byte{0}, min)
	if max >= 0 {
		limits = wasmbin.AppendU32(wasmbin.AppendU32([]byte{1}, min), uint32(max))
	}
	body := []byte{0, 0xd0, 0x70, 0x20, 0, 0xfc, 0x0f, 0, 0x0b} // ref.null func; local.get 0; table.grow 0
	return [][]byte{
		sec(wasmbin.TypeSection, 1, 0x60, 1, 0x7f, 1, 0x7f),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.TableSection, append([]byte{1, 0x70}, limits...)...),
		sec(wasmbin.ExportSection, 1, 4, 'g', 'r', 'o', 'w', kindFunc, 0),
		sec(wasmbin.CodeSection, append([]byte{1, byte(len(body))}, body...)...),
	}
}

// Modules that would make wazero allocate far more than their size, or
// define more or larger tables than allowed, are refused; the process lives.
func TestRefusedModules(t *testing.T) {
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	if m, err := e.Compile(t.Context(), binaryModule(voidFunc(wasmbounds.MaxLocals, 0x7f)...)); err != nil {
		t.Errorf("%d locals: %v", wasmbounds.MaxLocals, err)
	} else {
		m.Close(t.Context())
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	tables := append([]byte{wasmbounds.MaxTables + 1}, bytes.Repeat([]byte{0x70, 0, 0}, wasmbounds.MaxTables+1)...)
	for name, wasm := range map[string][]byte{
		"data segments":     binaryModule(sec(wasmbin.DataSection, huge...)),
		"custom name":       binaryModule(sec(wasmbin.CustomSection, huge...)),
		"parameters":        binaryModule(sec(wasmbin.TypeSection, append([]byte{1, 0x60}, huge...)...)),
		"import name":       binaryModule(sec(wasmbin.ImportSection, append([]byte{1}, huge...)...)),
		"function names":    binaryModule(sec(wasmbin.CustomSection, append([]byte{4, 'n', 'a', 'm', 'e', 1, 5}, huge...)...)),
		"element functions": binaryModule(sec(wasmbin.ElementSection, append([]byte{1, 1, 0}, huge...)...)),
		"locals":            binaryModule(voidFunc(wasmbounds.MaxLocals, 0x7f, 1, 0x7f)...),
		"table elements":    binaryModule(tableGuest(wasmbounds.MaxTableElements+1, -1)...),
		"tables":            binaryModule(sec(wasmbin.TableSection, tables...)),
	} {
		if m, err := e.Compile(t.Context(), wasm); err == nil {
			m.Close(t.Context())
			t.Errorf("%s: compiled", name)
		}
	}
}

// table.grow stops at wasmbounds.MaxTableElements whatever the module declares.
func TestTableGrowthCapped(t *testing.T) {
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	for _, max := range []int64{-1, wasmbounds.MaxTableElements + 1, 1<<32 - 1} {
		m, err := e.Compile(t.Context(), binaryModule(tableGuest(1, max)...))
		if err != nil {
			t.Fatal(err)
		}
		in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		grow := in.Function("grow")
		for _, tc := range []struct{ delta, want uint32 }{
			{math.MaxUint32 - 1, math.MaxUint32}, {wasmbounds.MaxTableElements, math.MaxUint32}, {wasmbounds.MaxTableElements - 1, 1},
		} {
			stack := []uint64{uint64(tc.delta)}
			if err := grow.Call(t.Context(), stack); err != nil {
				t.Fatal(err)
			}
			if got := uint32(stack[0]); got != tc.want {
				t.Errorf("max %d: table.grow(%d) = %d, want %d", max, tc.delta, int32(got), int32(tc.want))
			}
		}
		in.Close(t.Context())
		m.Close(t.Context())
	}
}

// A host function called by a guest that exports no memory sees every range
// out of bounds.
func TestHostFunctionWithoutMemory(t *testing.T) {
	var size uint32 = 1
	var readable bool
	fns := []runtime.HostFunction{{Name: "probe", Func: func(_ context.Context, mem runtime.Memory, _ []uint64) {
		size = mem.Size()
		_, readable = mem.Read(0, 0)
	}}}
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, HostModule: "env", HostFunctions: fns})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	body := []byte{0, 0x10, 0, 0x0b} // call 0
	wasm := binaryModule(
		sec(wasmbin.TypeSection, 1, 0x60, 0, 0),
		sec(wasmbin.ImportSection, 1, 3, 'e', 'n', 'v', 5, 'p', 'r', 'o', 'b', 'e', kindFunc, 0),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.ExportSection, 1, 3, 'r', 'u', 'n', kindFunc, 1),
		sec(wasmbin.CodeSection, append([]byte{1, byte(len(body))}, body...)...))
	m, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(t.Context())
	if err := in.Function("run").Call(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if size != 0 || readable {
		t.Errorf("Size() = %d, Read(0, 0) ok = %v; want 0, false", size, readable)
	}
}

// The interpreter, the fast tier, sizes a br_table's targets from the count
// the instruction declares; wazero's validator reads every target first, so
// a count the body cannot hold (2^32 - 16 targets in a few bytes: 64 GiB of
// targets to the interpreter) is refused before the interpreter sees it.
// Untrusted modules can therefore start on the interpreter.
func TestInterpreterBrTableCount(t *testing.T) {
	body := []byte{0x00, 0x41, 0x00, 0x0e, 0xf0, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x0b} // i32.const 0; br_table (2^32-16 targets)
	code := append([]byte{0x01, byte(len(body))}, body...)
	wasm := append([]byte{0, 'a', 's', 'm', 1, 0, 0, 0, 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0, 10, byte(len(code))}, code...)
	e, err := newTieredDriver(t, Config{Compiler: true, Tiering: runtime.TieringFast}).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	if m, err := e.Compile(t.Context(), wasm); err == nil {
		m.Close(t.Context())
		t.Fatal("a br_table declaring more targets than its body holds compiled")
	}
}

// A failed background compile is logged and leaves the module on the
// interpreter, where it keeps running.
func TestBackgroundCompileFails(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	e, err := newTieredDriver(t, Config{Compiler: true, Tiering: runtime.TieringOn}).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) }) // after the module's
	e.(*engine).failOptimise = errors.New("no compiler today")
	runtimetest.BackgroundCompileFails(t, e, "no compiler today", &logs)
}
