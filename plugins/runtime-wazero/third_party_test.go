package wazeroruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The compile cache's folder names the copy of wazero the build uses by a
// digest of its files, so a change to them (scripts/update-wazero, or the
// patch) must come with a new digest.
func TestThirdPartyWazeroDigest(t *testing.T) {
	root := filepath.Join("..", "..", filepath.FromSlash(thirdPartyWazero))
	h := sha256.New()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		h.Write([]byte(filepath.ToSlash(rel) + "\x00"))
		h.Write(b)
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil))[:16]; got != thirdPartyWazeroDigest {
		t.Errorf("third_party/wazero changed: set thirdPartyWazeroDigest in engine.go to %q (or remove what is there that git does not keep)", got)
	}
}

func TestCacheDirName(t *testing.T) {
	wazero := func(version string, replace *debug.Module) []*debug.Module {
		return []*debug.Module{{Path: "example.com/other", Version: "v1.0.0"}, {Path: "github.com/tetratelabs/wazero", Version: version, Replace: replace}}
	}
	for _, c := range []struct {
		deps []*debug.Module
		want string
	}{
		{wazero("v1.12.0", nil), "wazero-v1.12.0"},
		{wazero("v1.12.0", &debug.Module{Path: thirdPartyWazero, Version: "(devel)"}), "wazero-v1.12.0-" + thirdPartyWazeroDigest},
		{wazero("v1.12.0", &debug.Module{Path: "../elsewhere/wazero"}), ""},
		{wazero("v1.12.0", &debug.Module{Path: "example.com/fork", Version: "v1.12.1"}), ""},
		{wazero("", nil), ""},
		{nil, ""},
	} {
		if got := cacheDirName(c.deps); got != c.want {
			t.Errorf("cacheDirName(wazero %v replaced by %+v) = %q, want %q", c.deps, c.deps, got, c.want)
		}
	}
}

// A guest that runs ref.func in a loop makes the host allocate nothing per
// run: wazero v1.12.0 allocated a function reference each time (66 bytes a
// run, kept while the instance lives), so one event could make the host
// allocate gigabytes. The patch in third_party/wazero makes a function's
// reference once.
func TestRefFuncAllocatesOnce(t *testing.T) {
	// (func (export "f") (param i32)
	//   (loop (table.set 0 (i32.const 0) (ref.func 0))
	//         (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1))))))
	body := []byte{0, 0x03, 0x40, 0x41, 0, 0xd2, 0, 0x26, 0, 0x20, 0, 0x41, 1, 0x6b, 0x22, 0, 0x0d, 0, 0x0b, 0x0b}
	m := compileOn(t, binaryModule(
		sec(wasmbin.TypeSection, 1, 0x60, 1, 0x7f, 0),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.TableSection, 1, 0x70, 0, 1),
		sec(wasmbin.ExportSection, 1, 1, 'f', kindFunc, 0),
		sec(wasmbin.CodeSection, append([]byte{1, byte(len(body))}, body...)...),
	))
	inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(t.Context())
	f := inst.Function("f")
	const runs = 1_000_000
	allocated := testing.AllocsPerRun(1, func() {
		if err := f.Call(t.Context(), []uint64{runs}); err != nil {
			t.Fatal(err)
		}
	})
	if allocated > runs/100 {
		t.Errorf("%d runs of ref.func allocated %.0f times", runs, allocated)
	}
}

// A function's call engine takes its stack from a pool for each call
// rather than allocating 10 KiB for its life (the patch in
// third_party/wazero): the first call of a function in each of many
// instances, a new actor's start, hook and request, allocates far less
// than a stack each, and a function kept for later calls (the instance's
// cache, from a name's second lookup) holds none while it waits, though
// its last call went out to a host function (whose stack pointer it
// saved). Stacks grown by deep recursion, calls that trap deep down, and
// shallow calls on instances that take pooled stacks after them all give
// the right results.
func TestCallStacksArePooled(t *testing.T) {
	fns := []runtime.HostFunction{{Name: "h", Func: func(context.Context, runtime.Memory, []uint64) {}}}
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, HostModule: "env", HostFunctions: fns})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	// (func $f (export "f") (param i32) (result i32)
	//   (call $h)
	//   (if (i32.lt_s (local.get 0) (i32.const -1000)) (then unreachable))
	//   (if (result i32) (i32.lt_s (local.get 0) (i32.const 0))
	//     (then (call $f (i32.sub (local.get 0) (i32.const 1)))) ;; deeper, then a trap
	//     (else (if (result i32) (local.get 0)
	//       (then (i32.add (i32.const 1) (call $f (i32.sub (local.get 0) (i32.const 1)))))
	//       (else (i32.const 0))))))
	body := []byte{0, 0x10, 0, 0x20, 0, 0x41, 0x98, 0x78, 0x48, 0x04, 0x40, 0, 0x0b,
		0x20, 0, 0x41, 0, 0x48, 0x04, 0x7f, 0x20, 0, 0x41, 1, 0x6b, 0x10, 1,
		0x05, 0x20, 0, 0x04, 0x7f, 0x41, 1, 0x20, 0, 0x41, 1, 0x6b, 0x10, 1, 0x6a, 0x05, 0x41, 0, 0x0b,
		0x0b, 0x0b}
	m, err := e.Compile(t.Context(), binaryModule(
		sec(wasmbin.TypeSection, 2, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 0, 0),
		sec(wasmbin.ImportSection, 1, 3, 'e', 'n', 'v', 1, 'h', kindFunc, 1),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.ExportSection, 1, 1, 'f', kindFunc, 1),
		sec(wasmbin.CodeSection, append([]byte{1, byte(len(body))}, body...)...),
	))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	const instances = 200
	var all []runtime.Instance
	for range instances {
		inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(t.Context())
		all = append(all, inst)
	}
	depth := func(inst runtime.Instance, n int32) (uint64, error) {
		stack := []uint64{uint64(uint32(n))}
		err := inst.Function("f").Call(t.Context(), stack)
		return stack[0], err
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for _, inst := range all {
		for range 2 { // the second lookup's engine is kept
			if got, err := depth(inst, 3); err != nil || got != 3 {
				t.Fatalf("f(3) = %d, %v; want 3", got, err)
			}
		}
	}
	goruntime.ReadMemStats(&after)
	// Upstream: more than 10,240 bytes a function made (its stack, then its
	// engine); pooled, the engine alone.
	if perCall := (after.TotalAlloc - before.TotalAlloc) / (2 * instances); perCall > 6<<10 {
		t.Errorf("a function's first call allocated %d bytes on average; want its stack from the pool", perCall)
	}
	// Each call takes a stack the pool made anew: two collections empty
	// the pool, and a stack it dropped stays only if the engine holds it.
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	const kept = 40
	for _, inst := range all[:kept] {
		if got, err := depth(inst, 3); err != nil || got != 3 {
			t.Fatalf("f(3) = %d, %v; want 3", got, err)
		}
		goruntime.GC()
		goruntime.GC()
	}
	goruntime.ReadMemStats(&after)
	if held := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / kept; held > 4<<10 {
		t.Errorf("each instance's kept function holds %d bytes between calls; want no stack", held)
	}
	for i, inst := range all[:4] {
		n := int32(3)
		switch i {
		case 0:
			n = 5_000 // grows the stack well past 10 KiB
		case 1:
			if _, err := depth(inst, -1); err == nil { // a trap 1,000 calls deep, the stack grown
				t.Fatal("f(-1) returned")
			}
		}
		if got, err := depth(inst, n); err != nil || got != uint64(n) {
			t.Fatalf("instance %d: f(%d) = %d, %v", i, n, got, err)
		}
		if got, err := depth(all[len(all)-1-i], 7); err != nil || got != 7 {
			t.Fatalf("instance %d: f(7) = %d, %v", len(all)-1-i, got, err)
		}
	}
}

// fixedTableModule is a module with a table of 4,096 references to its
// function inc, which adds one to a global of the instance and returns
// it, called by call through the table's slot 5; exportTable exports the
// table, which keeps it from being fixed; nullSlot5 adds a second segment
// that puts ref.null in slot 5.
func fixedTableModule(exportTable, nullSlot5 bool) []byte {
	const slots = 4096
	elems := []byte{1, 0, 0x41, 0, 0x0b} // one active segment of table 0 at i32.const 0
	elems = wasmbin.AppendU32(elems, slots)
	elems = append(elems, make([]byte, slots)...) // ref.func 0, each
	if nullSlot5 {
		// flags 4: table 0, an offset, expressions: (ref.null func) at 5
		elems = append(elems, 4, 0x41, 5, 0x0b, 1, 0xd0, 0x70, 0x0b)
		elems[0] = 2
	}
	exports := []byte{1, 4, 'c', 'a', 'l', 'l', kindFunc, 1}
	if exportTable {
		exports = []byte{2, 4, 'c', 'a', 'l', 'l', kindFunc, 1, 1, 't', kindTable, 0}
	}
	inc := []byte{0, 0x23, 0, 0x41, 1, 0x6a, 0x24, 0, 0x23, 0, 0x0b} // global 0 += 1; global 0
	call := []byte{0, 0x41, 5, 0x11, 0, 0, 0x0b}                     // call_indirect (type 0) slot 5
	code := append([]byte{2, byte(len(inc))}, inc...)
	code = append(append(code, byte(len(call))), call...)
	return binaryModule(
		sec(wasmbin.TypeSection, 1, 0x60, 0, 1, 0x7f),
		sec(wasmbin.FunctionSection, 2, 0, 0),
		sec(wasmbin.TableSection, append([]byte{1, 0x70, 0}, wasmbin.AppendU32(nil, slots)...)...),
		sec(wasmbin.GlobalSection, 1, 0x7f, 1, 0x41, 0, 0x0b),
		sec(wasmbin.ExportSection, exports...),
		sec(wasmbin.ElementSection, elems...),
		sec(wasmbin.CodeSection, code...),
	)
}

// A table only call_indirect uses, filled with the module's own functions
// (a Go guest's, with a slot per function), is made once per module and
// shared by its instances (the patch's fixed tables): a call through it
// enters the instance that made it, and an instance allocates none of
// it. Exported, the table is each instance's own, as before.
func TestFixedTableSharedByInstances(t *testing.T) {
	for _, exported := range []bool{false, true} {
		m := compileOn(t, fixedTableModule(exported, false))
		var insts [2]runtime.Instance
		for i := range insts {
			inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close(t.Context())
			insts[i] = inst
		}
		for _, c := range []struct{ inst, want int }{{0, 1}, {0, 2}, {1, 1}, {0, 3}, {1, 2}} {
			stack := []uint64{0}
			if err := insts[c.inst].Function("call").Call(t.Context(), stack); err != nil || stack[0] != uint64(c.want) {
				t.Fatalf("table exported %v: instance %d's call = %d, %v; want %d", exported, c.inst, stack[0], err, c.want)
			}
		}

		code := m.code.Load()
		const instances = 20
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		for range instances {
			mod, err := code.rt.InstantiateModule(t.Context(), code.cm, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatal(err)
			}
			mod.Close(t.Context())
		}
		goruntime.ReadMemStats(&after)
		perInstance := (after.TotalAlloc - before.TotalAlloc) / instances
		if table := uint64(4096 * 8); exported != (perInstance >= table) {
			t.Errorf("table exported %v: an instance allocated %d bytes (the table is %d)", exported, perInstance, table)
		}
	}
}

// A later segment's ref.null empties a slot of a fixed table as it does
// any other: the call through it traps, as upstream's does.
func TestFixedTableNullSegment(t *testing.T) {
	m := compileOn(t, fixedTableModule(false, true))
	inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(t.Context())
	if err := inst.Function("call").Call(t.Context(), []uint64{0}); err == nil || !strings.Contains(err.Error(), "invalid table access") {
		t.Fatalf("a call through a slot a later segment emptied: %v, want invalid table access", err)
	}
}

// A call watches its ctx without a goroutine of its own (the patch's
// CloseModuleOnCanceledOrTimeout: upstream made one per call, created,
// woken and ended each time), and a ctx that ends after its call returned
// leaves the instance as it was; one that ends during a call stops it
// (TestConformance's limits).
func TestCallWatchesItsCtxWithoutAGoroutine(t *testing.T) {
	m := compileOn(t, fixedTableModule(false, false))
	inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(t.Context())
	call := inst.Function("call")
	const calls = 1000
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := created()
	for i := range calls {
		ctx, cancel := context.WithCancel(t.Context())
		stack := []uint64{0}
		err := call.Call(ctx, stack)
		cancel() // after the call: the instance stays open
		if err != nil || stack[0] != uint64(i+1) {
			t.Fatalf("call %d = %d, %v; want %d", i, stack[0], err, i+1)
		}
	}
	if n := created() - before; n > calls/10 {
		t.Errorf("%d calls, each with a ctx that can end, created %d goroutines", calls, n)
	}
}
