package wazeroruntime

import (
	"bytes"
	"context"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/spare/sparetest"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// compileOn compiles wasm on a new engine's compiler, closed with the
// test.
func compileOn(t *testing.T, wasm []byte) *module {
	t.Helper()
	e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	m, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m.(*module)
}

// Once a module gave out an instance, the next one is made ahead: its
// memory the image's, whatever the instance before wrote in its own, its
// stdout the kernel's that takes it. One made ahead of the module's tier
// change is not given out; the module's close frees the one ready.
func TestInstanceMadeAhead(t *testing.T) {
	m := compileOn(t, dataModule(2, vector(activeSegment(70000, []byte("image")))))
	made, freed := sparetest.Record(m.spare), sparetest.Freed(m.spare)
	a, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(t.Context())
	a.Memory().Write(70000, []byte("IMAGE"))
	ahead := sparetest.Next(t, m.spare, made)
	var out bytes.Buffer
	b, err := m.Instantiate(t.Context(), runtime.InstanceConfig{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(t.Context())
	if b != runtime.Instance(ahead) {
		t.Fatal("the second instance is not the one made ahead")
	}
	// What WASI's fd_write(1) writes to (wazero's stdout is ahead.stdout).
	if ahead.stdout.w != &out {
		t.Error("the instance made ahead's stdout is not the one given when it was taken")
	}
	if !ahead.imageMapped {
		t.Error("the instance made ahead does not map the image")
	}
	if got, _ := b.Memory().Read(70000, 5); string(got) != "image" {
		t.Errorf("the instance made ahead reads %q, want the image's %q", got, "image")
	}

	// The module tiers up: the one made ahead runs the code before.
	stale := sparetest.Next(t, m.spare, made)
	next := *m.code.Load()
	m.code.Store(&next)
	c, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	if c == runtime.Instance(stale) || c.(*instance).code != &next {
		t.Error("an instance made ahead of the module's new code was given out")
	}
	sparetest.WaitFreed(t, freed, stale, "the stale instance made ahead")
	if !stale.mod.IsClosed() {
		t.Error("the stale instance made ahead was freed but not closed")
	}

	last := sparetest.Next(t, m.spare, made)
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !last.mod.IsClosed() {
		t.Error("the module closed and the instance made ahead is still open")
	}
}

// A module with a start function, which runs guest code as an instance is
// made, makes none ahead.
func TestNoInstanceMadeAheadWithAStartFunction(t *testing.T) {
	// A start function that does nothing: func 0, type () -> ().
	m := compileOn(t, binaryModule(
		sec(wasmbin.TypeSection, 1, 0x60, 0, 0),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.StartSection, 0),
		sec(wasmbin.CodeSection, 1, 2, 0, 0x0b),
	))
	if m.spare != nil {
		t.Fatal("a module with a start function makes instances ahead")
	}
}

// An engine closed while an instance is being made ahead waits for it:
// closing wazero's runtime closes every instance of it, and the one being
// made had its memory unmapped under it.
func TestEngineClosedWhileAnInstanceIsMadeAhead(t *testing.T) {
	image := make([]byte, 1<<20)
	for i := range image {
		image[i] = byte(i)
	}
	wasm := dataModule(20, vector(activeSegment(0, image)))
	for range 20 {
		e, err := newDriver(t, true).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 20})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := e.Compile(t.Context(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		m := mc.(*module)
		// The hot pages learned: the one made ahead reads them all.
		first, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		view, _ := first.Memory().Read(0, 1<<20)
		var sum byte
		for p := 0; p < len(view); p += 4096 {
			sum += view[p]
		}
		if sum != 0 { // every page's first byte is 0
			t.Fatalf("the image reads %d", sum)
		}
		first.Close(t.Context())
		in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{}) // has the next made
		if err != nil {
			t.Fatal(err)
		}
		in.Close(t.Context())
		m.Close(t.Context())
		e.Close(t.Context())
	}
}

// A function is kept from its name's second lookup (a hook run on every
// event), not its first: one run once in an instance's life, such as
// on-init, would keep its call stack while the actor is resident.
func TestFunctionKeptFromTheSecondLookup(t *testing.T) {
	f := voidFunc()
	m := compileOn(t, binaryModule(f[0], f[1], sec(wasmbin.ExportSection, 1, 1, 'f', kindFunc, 0), f[2]))
	inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(t.Context())
	in := inst.(*instance)
	first := in.Function("f")
	if first == nil || in.funcs["f"] != nil {
		t.Fatalf("the first lookup gave %v and kept %v, want a function and nothing kept", first, in.funcs["f"])
	}
	second := in.Function("f")
	if second == first || in.funcs["f"] != second {
		t.Fatalf("the second lookup gave the first's function or did not keep its own")
	}
	if in.Function("f") != second {
		t.Error("the third lookup did not give the kept function")
	}
	for _, fn := range []runtime.Function{first, second} {
		if err := fn.Call(t.Context(), make([]uint64, 1)); err != nil {
			t.Error(err)
		}
	}
	for range 2 {
		if in.Function("nosuch") != nil {
			t.Error("a name the module does not export gave a function")
		}
	}
}
