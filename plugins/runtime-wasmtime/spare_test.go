//go:build cgo

package wasmtimeruntime

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/spare/sparetest"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Once a module gave out an instance, the next one is made ahead: its
// memory fresh, whatever the instance before wrote in its own, its stdout
// the kernel's that takes it. One made ahead of the module's switch to
// optimised code is not given out; the module's close frees the one ready.
func TestInstanceMadeAhead(t *testing.T) {
	w := newWasmMod()
	w.importFunc("wasi_snapshot_preview1", "fd_write", "iiii", "i")
	m := compile(t, runtime.Config{}, w.bytes())
	<-m.Optimised() // the code the module keeps
	made, freed := sparetest.Record(m.spare), sparetest.Freed(m.spare)
	var outA, outB bytes.Buffer
	a, err := m.Instantiate(t.Context(), runtime.InstanceConfig{Stdout: &outA})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(t.Context())
	a.Memory().Write(100, []byte("abc"))
	ahead := sparetest.Next(t, m.spare, made)
	b, err := m.Instantiate(t.Context(), runtime.InstanceConfig{Stdout: &outB})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(t.Context())
	if b != runtime.Instance(ahead) {
		t.Fatal("the second instance is not the one made ahead")
	}
	if got, _ := b.Memory().Read(100, 3); !bytes.Equal(got, make([]byte, 3)) {
		t.Errorf("the instance made ahead reads %q, want zeros", got)
	}
	// fd_write(stdout, one iovec at 0: 3 bytes at 100, written count at 64)
	b.Memory().Write(100, []byte("xyz"))
	b.Memory().Write(0, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 100), 3))
	if err := b.Function("fd_write").Call(t.Context(), []uint64{1, 0, 1, 64}); err != nil {
		t.Fatal(err)
	}
	if outB.String() != "xyz" || outA.Len() != 0 {
		t.Errorf("the instance made ahead wrote %q to its stdout and %q to the first one's; want %q and none", outB.String(), outA.String(), "xyz")
	}

	// The module switches code: the one made ahead runs the code before.
	stale := sparetest.Next(t, m.spare, made)
	m.mu.Lock()
	next := *m.b
	m.b = &next
	m.mu.Unlock()
	c, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	if c == runtime.Instance(stale) || c.(*instance).code != &next {
		t.Error("an instance made ahead of the module's new code was given out")
	}
	sparetest.WaitFreed(t, freed, stale, "the stale instance made ahead")
	if stale.st != nil {
		t.Error("the stale instance made ahead was freed but not closed")
	}

	last := sparetest.Next(t, m.spare, made)
	if err := m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if last.st != nil {
		t.Error("the module closed and the instance made ahead is still open")
	}
}

// A module with a start function, which runs guest code as an instance is
// made, makes none ahead.
func TestNoInstanceMadeAheadWithAStartFunction(t *testing.T) {
	w := newWasmMod()
	w.start = int(w.function("", "", ""))
	if compile(t, runtime.Config{}, w.bytes()).spare != nil {
		t.Fatal("a module with a start function makes instances ahead")
	}
}
