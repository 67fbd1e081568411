package wazeroruntime

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// dataModule is a module with a memory of minPages, exported as "memory",
// and the given data section payload (none if nil).
func dataModule(minPages byte, data []byte, extra ...[]byte) []byte {
	secs := [][]byte{sec(wasmbin.MemorySection, 1, 0, minPages)}
	secs = append(secs, sec(wasmbin.ExportSection, 1, 6, 'm', 'e', 'm', 'o', 'r', 'y', kindMemory, 0))
	secs = append(secs, extra...)
	if data != nil {
		secs = append(secs, sec(wasmbin.DataSection, data...))
	}
	return binaryModule(secs...)
}

// activeSegment is an active data segment at offset in memory 0.
func activeSegment(offset int32, b []byte) []byte {
	s := wasmbin.AppendS64([]byte{0, 0x41}, int64(offset))
	return append(wasmbin.AppendU32(append(s, 0x0b), uint32(len(b))), b...)
}

func vector(entries ...[]byte) []byte {
	out := wasmbin.AppendU32(nil, uint32(len(entries)))
	for _, e := range entries {
		out = append(out, e...)
	}
	return out
}

// memoryAfter instantiates wasm with wazero as it is and, prepared, with the
// engine, and returns both memories' contents, or the errors.
func memoryAfter(t *testing.T, e runtime.Engine, rt wazero.Runtime, wasm []byte) (want, got []byte, wantErr, gotErr error) {
	t.Helper()
	ctx := t.Context()
	if mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName("")); err != nil {
		wantErr = err
	} else {
		want, _ = mod.Memory().Read(0, mod.Memory().Size())
		want = bytes.Clone(want)
		mod.Close(ctx)
	}
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		return want, nil, wantErr, err
	}
	defer m.Close(ctx)
	in, err := m.Instantiate(ctx, runtime.InstanceConfig{})
	if err != nil {
		return want, nil, wantErr, err
	}
	defer in.Close(ctx)
	got, _ = in.Memory().Read(0, in.Memory().Size())
	return want, bytes.Clone(got), wantErr, nil
}

// A module whose data segments prepare replaces with an image starts with
// the same memory as wazero gives it from the segments, and one that keeps
// its segments (or fails to instantiate) does so as before.
func TestMemoryImage(t *testing.T) {
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	rt := wazero.NewRuntimeWithConfig(t.Context(), wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(t.Context())

	passive := append(wasmbin.AppendU32([]byte{1}, 3), 'a', 'b', 'c')
	globalOffset := append([]byte{0, 0x23, 0, 0x0b, 3}, 'a', 'b', 'c') // offset: global.get 0
	for _, tc := range []struct {
		name  string
		wasm  []byte
		image bool
	}{
		{"in order", dataModule(1, vector(activeSegment(0, []byte("abc")), activeSegment(100, []byte("xyz")))), true},
		{"overlapping: the later wins", dataModule(1, vector(activeSegment(10, []byte("aaaaaa")), activeSegment(12, []byte("bb")), activeSegment(5, []byte("cccccc")))), true},
		{"up to the end of memory", dataModule(1, vector(activeSegment(65536-3, []byte("end")))), true},
		{"empty segments", dataModule(1, vector(activeSegment(7, nil), activeSegment(65536, nil))), true},
		{"past the end of memory", dataModule(1, vector(activeSegment(0, []byte("ok")), activeSegment(65536-1, []byte("no")))), false},
		{"negative offset", dataModule(1, vector(activeSegment(-1, []byte("x")))), false},
		{"sparse", dataModule(64, vector(activeSegment(3<<20, []byte("far")))), false},
		{"passive segment", dataModule(1, vector(activeSegment(1, []byte("x")), passive), sec(wasmbin.DataCountSection, 2)), false},
		{"offset from a global", dataModule(1, vector(globalOffset), sec(wasmbin.GlobalSection, 1, 0x7f, 0, 0x41, 8, 0x0b)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := prepare(tc.wasm, maxPages)
			if err != nil {
				t.Fatal(err)
			}
			if (p.image != nil) != tc.image {
				t.Errorf("prepare made an image: %v, want %v", p.image != nil, tc.image)
			}
			want, got, wantErr, gotErr := memoryAfter(t, e, rt, tc.wasm)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("wazero: %v; prepared: %v", wantErr, gotErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("memories differ: %d bytes from wazero, %d prepared", len(want), len(got))
			}
		})
	}

	// Random segments, overlapping or out of bounds.
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var segs [][]byte
		for range 1 + rnd.IntN(20) {
			b := make([]byte, rnd.IntN(300))
			for j := range b {
				b[j] = byte(rnd.IntN(256))
			}
			segs = append(segs, activeSegment(int32(rnd.IntN(2*65536)), b))
		}
		wasm := dataModule(byte(1+rnd.IntN(2)), vector(segs...))
		want, got, wantErr, gotErr := memoryAfter(t, e, rt, wasm)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("module %d: wazero (%v) and prepared (%v) disagree", i, wantErr, gotErr)
		}
	}
}

// Instances map the image copy-on-write: what one writes, another does not
// see, and a new instance starts from the image.
func TestMemoryImageCopyOnWrite(t *testing.T) {
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	m, err := e.Compile(t.Context(), dataModule(2, vector(activeSegment(70000, []byte("image")))))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	if m.(*module).image == nil {
		t.Fatal("no image")
	}
	a, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(t.Context())
	a.Memory().Write(70000, []byte("IMAGE"))
	b, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(t.Context())
	for in, want := range map[runtime.Instance]string{a: "IMAGE", b: "image"} {
		if got, _ := in.Memory().Read(70000, 5); string(got) != want {
			t.Errorf("read %q, want %q", got, want)
		}
	}
}
