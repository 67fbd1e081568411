package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// A module compiles, instantiates and its exports compute with i32 and i64
// values; a missing export is nil. A module with nothing in it works too.
func testCompileInstantiateCall(t *testing.T, h *harness) {
	in := h.start(t, runtime.Config{}, addGuest())
	if got := int32(call(t, in, "add32", i32(-7), i32(3))[0]); got != -4 {
		t.Errorf("add32(-7, 3) = %d, want -4", got)
	}
	if got := uint32(call(t, in, "add32", i32(-1), 1)[0]); got != 0 {
		t.Errorf("add32(-1, 1) = %d, want 0 (wrapped)", got)
	}
	if got := call(t, in, "add64", 1<<40, math.MaxUint64)[0]; got != 1<<40-1 {
		t.Errorf("add64(1<<40, -1) = %d, want %d", got, uint64(1<<40-1))
	}
	if f := in.Function("missing"); f != nil {
		t.Errorf("Function(missing) = %v, want nil", f)
	}
	if in.Memory() == nil || in.Memory().Size() != 65536 {
		t.Errorf("Memory() = %v, want one page", in.Memory())
	}

	empty := (&wasmModule{}).bytes()
	in = h.start(t, runtime.Config{}, empty)
	if in.Memory() != nil {
		t.Errorf("a module without memory: Memory() = %v, want nil", in.Memory())
	}
}

// Compile refuses bytes that are not a valid module.
func testInvalidModule(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	valid := addGuest()
	for name, wasm := range map[string][]byte{
		"empty":     nil,
		"not wasm":  []byte("hello, world"),
		"truncated": valid[:len(valid)-3],
	} {
		if m, err := e.Compile(t.Context(), wasm); err == nil {
			m.Close(t.Context())
			t.Errorf("Compile(%s) succeeded", name)
		}
	}
}

// Imports lists every import with its signature (non-functions with IsFunc
// false), Exports every exported function, and ExportsMemory tells exported
// memories by name.
func testImportsExports(t *testing.T, h *harness) {
	m := &wasmModule{}
	m.importFunc(hostModule, "f", sig("iIfF>i"))
	m.importFunc(wasiModule, "fd_write", sig("iiii>i"))
	m.importOther("env", "table", 1, cat([]byte{0x70}, limits(1, -1))...)
	m.importOther("env", "memory", 2, limits(1, -1)...)
	m.importOther("env", "global", 3, byte(runtime.I32), 0)
	m.function("b", sig("F>I"), nil, i64Const(0))
	m.function("a", sig(""), nil)
	m.exports = append(m.exports, cat(str("mem"), []byte{0x02, 0x00})) // re-export the imported memory
	mod := compile(t, h.engine(t, runtime.Config{}), m.bytes())

	fn := func(module, name, s string) runtime.Import {
		return runtime.Import{Module: module, Name: name, Signature: sig(s), IsFunc: true}
	}
	other := func(module, name string) runtime.Import { return runtime.Import{Module: module, Name: name} }
	wantImports := []runtime.Import{
		other("env", "global"), other("env", "memory"), other("env", "table"),
		fn(wasiModule, "fd_write", "iiii>i"), fn(hostModule, "f", "iIfF>i"),
	}
	gotImports := mod.Imports()
	slices.SortFunc(gotImports, func(a, b runtime.Import) int {
		return strings.Compare(a.Module+"."+a.Name, b.Module+"."+b.Name)
	})
	if fmt.Sprint(gotImports) != fmt.Sprint(wantImports) {
		t.Errorf("Imports:\n got %v\nwant %v", gotImports, wantImports)
	}

	wantExports := []runtime.Export{{Name: "a"}, {Name: "b", Signature: sig("F>I")}}
	gotExports := mod.Exports()
	slices.SortFunc(gotExports, func(a, b runtime.Export) int { return strings.Compare(a.Name, b.Name) })
	if fmt.Sprint(gotExports) != fmt.Sprint(wantExports) {
		t.Errorf("Exports:\n got %v\nwant %v", gotExports, wantExports)
	}
	if !mod.ExportsMemory("mem") || mod.ExportsMemory("memory") {
		t.Errorf("ExportsMemory(mem, memory) = %v, %v, want true, false", mod.ExportsMemory("mem"), mod.ExportsMemory("memory"))
	}
}

// Instances of one module share nothing: each starts from the module's data,
// and a store to memory or to a global in one is invisible to another.
func testInstancesIsolated(t *testing.T, h *harness) {
	mod := compile(t, h.engine(t, runtime.Config{}), cellGuest())
	a, err := mod.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	call(t, a, "set", 1)
	b := instantiate(t, mod, runtime.InstanceConfig{})
	if got := call(t, b, "get")[0]; got != 42 {
		t.Errorf("new instance: get() = %d, want 42 (the module's data)", got)
	}
	call(t, b, "set", 3)
	call(t, b, "set", 2)
	if got := call(t, a, "get")[0]; got != 1 {
		t.Errorf("get() = %d after another instance stored 2, want 1", got)
	}
	if sa, sb := call(t, a, "sets")[0], call(t, b, "sets")[0]; sa != 1 || sb != 2 {
		t.Errorf("globals: sets() = %d, %d; want 1, 2", sa, sb)
	}
	if got := readU32(t, a, 0); got != 1 {
		t.Errorf("Memory().Read = %d, want 1", got)
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := call(t, b, "get")[0]; got != 2 {
		t.Errorf("get() = %d after closing the other instance, want 2", got)
	}
}

type ctxKey struct{}

// Host functions get the call's ctx, the parameters on the stack and the
// guest's memory as a view; they return results on the stack.
func testHostFunctionRoundTrip(t *testing.T, h *harness) {
	var sawCtx any
	fns := []runtime.HostFunction{
		{Name: "upper", Signature: sig("iiii>i"), Func: func(ctx context.Context, mem runtime.Memory, stack []uint64) {
			sawCtx = ctx.Value(ctxKey{})
			upper(ctx, mem, stack)
		}},
		{Name: "poke", Signature: sig("i>"), Func: func(_ context.Context, mem runtime.Memory, stack []uint64) {
			view, _ := mem.Read(uint32(stack[0]), 1)
			view[0] = '!'
		}},
		{Name: "mix", Signature: sig("iIfF>IF"), Func: func(_ context.Context, _ runtime.Memory, stack []uint64) {
			a, b := int32(uint32(stack[0])), int64(stack[1])
			c, d := math.Float32frombits(uint32(stack[2])), math.Float64frombits(stack[3])
			stack[0] = uint64(int64(a) + b + int64(c) + int64(d))
			stack[1] = math.Float64bits(d * 2)
		}},
		{Name: "bounds", Signature: sig(">i"), Func: func(_ context.Context, mem runtime.Memory, stack []uint64) {
			size := mem.Size()
			_, inside := mem.Read(size-1, 1)
			_, across := mem.Read(size-1, 2)
			_, wraps := mem.Read(math.MaxUint32, 2)
			stack[0] = 0
			if size == 65536 && inside && !across && !wraps && !mem.Write(size-2, []byte{1, 2, 3}) {
				stack[0] = 1
			}
		}},
	}
	in := h.start(t, runtime.Config{HostFunctions: fns}, hostGuest(fns))

	write(t, in, 0, []byte("hello, host"))
	ctx := context.WithValue(t.Context(), ctxKey{}, "call ctx")
	stack, err := tryCall(ctx, in, "run", 0, 11)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := uint32(stack[0]); n != 11 {
		t.Errorf("run returned %d, want 11", n)
	}
	if got := read(t, in, 1024, 11); string(got) != "HELLO, HOST" {
		t.Errorf("host wrote %q, want %q", got, "HELLO, HOST")
	}
	if sawCtx != "call ctx" {
		t.Errorf("host function's ctx has value %v, want the call's", sawCtx)
	}

	call(t, in, "poke", 5)
	if got := read(t, in, 0, 11); string(got) != "hello! host" {
		t.Errorf("after a write through Read's view memory holds %q, want %q", got, "hello! host")
	}

	stack = call(t, in, "mix", i32(-5), 1<<40, uint64(math.Float32bits(1.5)), math.Float64bits(-2.25))
	if got, want := int64(stack[0]), int64(-5+1<<40+1-2); got != want {
		t.Errorf("mix result 0 = %d, want %d", got, want)
	}
	if got := math.Float64frombits(stack[1]); got != -4.5 {
		t.Errorf("mix result 1 = %v, want -4.5", got)
	}

	if call(t, in, "bounds")[0] != 1 {
		t.Error("Memory bounds: want Size 65536, the last byte readable, reads and writes across the end or wrapping refused")
	}
}

// upper is the host function upper(ptr, len, out_ptr, out_cap) -> n: it
// writes the upper case of its input to the output and returns its length.
func upper(_ context.Context, mem runtime.Memory, stack []uint64) {
	in, ok := mem.Read(uint32(stack[0]), uint32(stack[1]))
	if !ok || len(in) > int(uint32(stack[3])) || !mem.Write(uint32(stack[2]), bytes.ToUpper(in)) {
		panic(errors.New("upper: out of bounds"))
	}
	stack[0] = i32(int32(len(in)))
}

type hostError struct{ msg string }

func (e *hostError) Error() string { return e.msg }

// A host function that panics with an error fails the call with an error
// that wraps it.
func testHostFunctionPanic(t *testing.T, h *harness) {
	sentinel := &hostError{"refused by the host"}
	fns := []runtime.HostFunction{{Name: "fail", Func: func(context.Context, runtime.Memory, []uint64) {
		panic(fmt.Errorf("fail: %w", sentinel))
	}}}
	in := h.start(t, runtime.Config{HostFunctions: fns}, hostGuest(fns))
	_, err := tryCall(t.Context(), in, "fail")
	wantFailure(t, "fail", err)
	var he *hostError
	if !errors.Is(err, sentinel) || !errors.As(err, &he) {
		t.Errorf("error %q does not wrap the host's (errors.Is/As)", err)
	}
}

// Traps fail the call with an error that names them, and leave the engine
// usable.
func testTraps(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	mod := compile(t, e, failGuest())
	for name, want := range map[string]string{"unreachable": "unreachable", "out_of_bounds": "out of bounds"} {
		in := instantiate(t, mod, runtime.InstanceConfig{})
		_, err := tryCall(t.Context(), in, name)
		wantFailure(t, name, err)
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %q", name, err, want)
		}
	}
	in := startOn(t, e, addGuest())
	call(t, in, "add32", 1, 2)
}

// Unbounded recursion fails the call; it does not crash the process, and the
// module still runs.
func testStackOverflow(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	_, err := tryCall(t.Context(), startOn(t, e, failGuest()), "recurse")
	wantFailure(t, "recurse", err)
	call(t, startOn(t, e, addGuest()), "add32", 1, 2)
}

// Engines and modules are safe for concurrent use.
func testConcurrency(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	shared := compile(t, e, cellGuest())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			own, err := e.Compile(t.Context(), cellGuest())
			if err != nil {
				t.Errorf("Compile: %v", err)
				return
			}
			defer own.Close(t.Context())
			for _, mod := range []runtime.Module{own, shared, own, shared} {
				in, err := mod.Instantiate(t.Context(), runtime.InstanceConfig{})
				if err != nil {
					t.Errorf("Instantiate: %v", err)
					return
				}
				if _, err := tryCall(t.Context(), in, "set", uint64(g)); err != nil {
					t.Errorf("set: %v", err)
				}
				if stack, err := tryCall(t.Context(), in, "get"); err != nil || stack[0] != uint64(g) {
					t.Errorf("get() = %v, %v; want %d", stack, err, g)
				}
				in.Close(t.Context())
			}
		})
	}
	wg.Wait()
}

// An instance runs on after its module is closed (the kernel closes a
// class's module when a pre-initialised one replaces it, ADR 1040, while
// actors still hold instances of it), its memory's initial contents
// included; the closed module makes no more.
func testInstanceOutlivesModule(t *testing.T, h *harness) {
	ctx := t.Context()
	m, err := h.engine(t, runtime.Config{}).Compile(ctx, cellGuest())
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.Instantiate(ctx, runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := call(t, in, "get")[0]; got != 42 {
		t.Errorf("get() after the module closed = %d, want its data segment's 42", got)
	}
	call(t, in, "set", 7)
	if got := call(t, in, "get")[0]; got != 7 {
		t.Errorf("get() after set(7) = %d", got)
	}
	if in2, err := m.Instantiate(ctx, runtime.InstanceConfig{}); err == nil {
		in2.Close(ctx)
		t.Error("a closed module made an instance")
	}
}
