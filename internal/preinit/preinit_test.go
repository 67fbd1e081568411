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
// stores in both and sets its mutable globals (an i32, an i64 and an f64;
// an immutable i32 of 7 is exported as "seven"). Its data segment writes
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
	if m.Globals() != 3 {
		t.Fatalf("Globals() = %d, want 3", m.Globals())
	}
	globals, mem, _ := globalsOf(t, rt, wasm, true)
	snap, err := m.Snapshot(mem, globals)
	if err != nil {
		t.Fatal(err)
	}

	// The snapshot, instantiated without running anything, holds what the
	// start left: memory, mutable globals, and the immutable one as it was.
	got, snapMem, inst := globalsOf(t, rt, snap, false)
	want := []uint64{uint64(uint32(0xfffffffb)), 1 << 40, math.Float64bits(2.5)}
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

func TestDataSegmentsSkipZerosAndMergeShortGaps(t *testing.T) {
	mem := make([]byte, 1<<16)
	copy(mem[100:], "ab")
	mem[100+2+mergeGap-1] = 'c' // mergeGap-1 zeros after "ab": one segment
	mem[5000] = 'd'             // further: a segment of its own
	r := wasmbin.Reader{Rest: dataSegments(mem)}
	var got []string
	for n := r.U32(); n > 0 && r.Err == nil; n-- {
		r.Bytes(2) // active, memory 0; i32.const
		off := r.S32()
		r.Byte() // end
		got = append(got, fmt.Sprint(off, "+", len(r.Bytes(r.U32()))))
	}
	if want := fmt.Sprint(100, "+", 2+mergeGap, " 5000+1"); strings.Join(got, " ") != want || r.Err != nil {
		t.Errorf("segments %q (%v), want %s", got, r.Err, want)
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
	} {
		if _, err := Parse(tc.wasm); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse gives %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if Asks(startModule(standardExports[:2])) {
		t.Error("a module without the marker asks")
	}
}
