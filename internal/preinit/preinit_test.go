package preinit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
)

func vec(entries ...[]byte) []byte {
	b := wasmbin.AppendU32(nil, uint32(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return b
}

func name(s string) []byte { return append(wasmbin.AppendU32(nil, uint32(len(s))), s...) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// startModule is a reactor whose _initialize grows its memory to two pages,
// stores in both and sets its mutable globals (an i32, an i64, an f64 and
// an f32; an immutable i32 of 7 between them is exported as "seven"). Its data segment writes
// "hello" at 0. extra sections are appended (a data count, say).
func startModule(exports [][]byte, extra ...[]byte) []byte {
	i32 := func(v int32) []byte { return wasmbin.AppendS64([]byte{0x41}, int64(v)) }
	store := func(addr, v int32) []byte { return cat(i32(addr), i32(v), []byte{0x36, 2, 0}) } // i32.store align 2 offset 0
	f64 := make([]byte, 8)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(2.5))
	body := cat([]byte{0},
		i32(1), []byte{0x40, 0, 0x1a}, // memory.grow 1; drop
		store(10, 5), store(70000, 0x11223344),
		i32(-5), []byte{0x24, 0}, // global.set 0
		wasmbin.AppendS64([]byte{0x42}, 1<<40), []byte{0x24, 1},
		[]byte{0x44}, f64, []byte{0x24, 2},
		[]byte{0x43}, binary.LittleEndian.AppendUint32(nil, math.Float32bits(-1.5)), []byte{0x24, 4},
		[]byte{0x0b})
	m := cat(wasmbin.Header,
		wasmbin.AppendSection(nil, wasmbin.TypeSection, vec([]byte{0x60, 0, 0})),
		wasmbin.AppendSection(nil, wasmbin.FunctionSection, vec([]byte{0})),
		wasmbin.AppendSection(nil, wasmbin.MemorySection, vec([]byte{1, 1, 4})),
		wasmbin.AppendSection(nil, wasmbin.GlobalSection, vec(
			cat([]byte{0x7f, 1}, i32(0), []byte{0x0b}),
			cat([]byte{0x7e, 1, 0x42, 0, 0x0b}),
			cat([]byte{0x7c, 1, 0x44}, make([]byte, 8), []byte{0x0b}),
			cat([]byte{0x7f, 0}, i32(7), []byte{0x0b}),
			cat([]byte{0x7d, 1, 0x43}, make([]byte, 4), []byte{0x0b}),
		)),
		wasmbin.AppendSection(nil, wasmbin.ExportSection, vec(exports...)),
	)
	for _, e := range extra {
		m = append(m, e...)
	}
	return cat(m,
		wasmbin.AppendSection(nil, wasmbin.CodeSection, vec(append(wasmbin.AppendU32(nil, uint32(len(body))), body...))),
		wasmbin.AppendSection(nil, wasmbin.DataSection, vec(cat([]byte{0}, i32(0), []byte{0x0b}, name("hello")))),
	)
}

// manyGlobals is a module of n mutable i32 globals.
func manyGlobals(n int) []byte {
	var gs [][]byte
	for range n {
		gs = append(gs, []byte{0x7f, 1, 0x41, 0, 0x0b})
	}
	return cat(wasmbin.Header,
		wasmbin.AppendSection(nil, wasmbin.TypeSection, vec([]byte{0x60, 0, 0})),
		wasmbin.AppendSection(nil, wasmbin.FunctionSection, vec([]byte{0})),
		wasmbin.AppendSection(nil, wasmbin.MemorySection, vec([]byte{0, 1})),
		wasmbin.AppendSection(nil, wasmbin.GlobalSection, vec(gs...)),
		wasmbin.AppendSection(nil, wasmbin.ExportSection, vec(standardExports[0])),
		wasmbin.AppendSection(nil, wasmbin.CodeSection, vec([]byte{2, 0, 0x0b})),
	)
}

var standardExports = [][]byte{
	cat(name("memory"), []byte{2, 0}),
	cat(name("_initialize"), []byte{0, 0}),
	cat(name(Marker), []byte{0, 0}),
	cat(name("seven"), []byte{3, 3}),
}

// globalsOf instantiates instrumented wasm, calls _initialize if start,
// and returns its mutable globals, its memory and the module.
func globalsOf(t *testing.T, rt wazero.Runtime, wasm []byte, start bool) ([]uint64, []byte, api.Module) {
	t.Helper()
	ctx := context.Background()
	m, err := Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := rt.InstantiateWithConfig(ctx, m.Instrumented(), wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	if start {
		if _, err := inst.ExportedFunction("_initialize").Call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	globals, err := inst.ExportedFunction(GlobalsExport).Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := inst.Memory().Read(0, inst.Memory().Size())
	return globals, append([]byte(nil), mem...), inst
}

func TestSnapshotStartsWhereTheStartLeftOff(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasm := startModule(standardExports)
	if !Asks(wasm) {
		t.Fatal("a module exporting the marker does not ask")
	}
	m, err := Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if m.Globals() != 4 {
		t.Fatalf("Globals() = %d, want 4", m.Globals())
	}
	globals, mem, _ := globalsOf(t, rt, wasm, true)
	snap, err := m.Snapshot(mem, globals)
	if err != nil {
		t.Fatal(err)
	}

	// The snapshot, instantiated without running anything, holds what the
	// start left: memory, mutable globals, and the immutable one as it was.
	got, snapMem, inst := globalsOf(t, rt, snap, false)
	want := []uint64{uint64(uint32(0xfffffffb)), 1 << 40, math.Float64bits(2.5), uint64(math.Float32bits(-1.5))}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("global %d is %#x after the snapshot, want %#x", i, got[i], want[i])
		}
	}
	if v := inst.ExportedGlobal("seven").Get(); v != 7 {
		t.Errorf("the immutable global is %d, want 7", v)
	}
	if len(snapMem) != 2<<16 || string(snapMem[:5]) != "hello" || snapMem[10] != 5 ||
		binary.LittleEndian.Uint32(snapMem[70000:]) != 0x11223344 {
		t.Errorf("memory of %d bytes, %q at 0, %d at 10, %#x at 70000", len(snapMem), snapMem[:5], snapMem[10], binary.LittleEndian.Uint32(snapMem[70000:]))
	}
	if inst.ExportedFunction("_initialize") != nil {
		t.Error("the snapshot still exports _initialize")
	}
	// The control: the module itself, not started, holds none of it.
	if g, m0, _ := globalsOf(t, rt, wasm, false); g[1] != 0 || len(m0) != 1<<16 {
		t.Errorf("the module unstarted has global %d and %d bytes of memory", g[1], len(m0))
	}
}

// segments reads a data section's payload as "offset+length" strings.
func segments(t *testing.T, payload []byte) []string {
	t.Helper()
	r := wasmbin.Reader{Rest: payload}
	var got []string
	for n := r.U32(); n > 0 && r.Err == nil; n-- {
		r.Bytes(2) // active, memory 0; i32.const
		off := uint32(r.S32())
		r.Byte() // end
		got = append(got, fmt.Sprint(off, "+", len(r.Bytes(r.U32()))))
	}
	if r.Err != nil || len(r.Rest) > 0 {
		t.Fatalf("data section: %v, %d bytes left", r.Err, len(r.Rest))
	}
	return got
}

func TestDataSegmentsSkipZerosAndMergeShortGaps(t *testing.T) {
	gap := mergeGaps[0]
	mem := make([]byte, 1<<16)
	copy(mem[100:], "ab")
	mem[100+2+gap-1] = 'c' // gap-1 zeros after "ab": one segment
	mem[5000] = 'd'        // further: a segment of its own
	got := strings.Join(segments(t, dataSegments(mem)), " ")
	if want := fmt.Sprint(100, "+", 2+gap, " 5000+1"); got != want {
		t.Errorf("segments %s, want %s", got, want)
	}
	if got := segments(t, dataSegments(make([]byte, 1<<16))); len(got) != 0 {
		t.Errorf("a memory of zeros gives segments %v", got)
	}
}

// A memory whose bytes are scattered makes wider gaps, so that no snapshot
// has more than maxSegments segments (Wasmtime refuses 100,000).
func TestDataSegmentsStayFew(t *testing.T) {
	mem := make([]byte, 16<<20)
	for i := 0; i < len(mem); i += 100 {
		mem[i] = 1
	}
	got := segments(t, dataSegments(mem))
	if len(got) > maxSegments || len(got) == 0 {
		t.Fatalf("%d segments, want 1 to %d", len(got), maxSegments)
	}
}

func TestParseRefusesWhatItCannotSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"command", startModule(append(standardExports[:3:3], cat(name("_start"), []byte{0, 0}))), "command"},
		{"data count", startModule(standardExports, wasmbin.AppendSection(nil, wasmbin.DataCountSection, []byte{1})), "passive data"},
		{"not wasm", []byte("hello"), "not a WebAssembly module"},
		{"too many globals", manyGlobals(MaxGlobals + 1), "1001 mutable globals"},
		{"name taken", startModule(append(standardExports[:3:3], cat(name(GlobalsExport), []byte{0, 0}))), "the name pre-initialisation adds"},
	} {
		if _, err := Parse(tc.wasm); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse gives %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if Asks(startModule(standardExports[:2])) {
		t.Error("a module without the marker asks")
	}
	if _, err := Parse(manyGlobals(MaxGlobals)); err != nil {
		t.Errorf("%d globals: %v", MaxGlobals, err)
	}
	m, err := Parse(startModule(standardExports))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(make([]byte, MaxMemory+1<<16), make([]uint64, 4)); err == nil || !strings.Contains(err.Error(), "more than the 64 MiB") {
		t.Errorf("a memory over MaxMemory: %v", err)
	}
	if _, err := m.Snapshot(make([]byte, 1<<16), make([]uint64, 3)); err == nil {
		t.Error("a snapshot with a global value missing succeeded")
	}

}
