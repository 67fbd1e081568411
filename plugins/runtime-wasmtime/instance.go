//go:build cgo

package wasmtimeruntime

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/cgo"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// instance is one instance in its own store. Only the goroutine calling
// into it touches it, and the C callbacks of a call run on that goroutine
// too, so it needs no locks.
type instance struct {
	e    *engine
	mod  *module
	code *backend // what it runs (tier.go)
	// hotLearned says the module's hot pages were learned, and so
	// populated, when it was made.
	hotLearned bool

	st *C.wk_store // nil once closed
	// handle is how the C callbacks find the instance.
	handle cgo.Handle
	// raw is st.raw, the call buffer, as Go sees it.
	raw []rawVal
	mem memory
	// funcs caches Function.
	funcs map[string]*function

	stdout, stderr io.Writer

	// While guest code runs (running): the call's ctx, and what the
	// callbacks saw.
	running     bool
	ctx         context.Context
	interrupted bool  // the ctx was done: the guest was stopped
	hostErr     error // a host function failed the call
	// hostStack is the stack of host function calls; inHost says it is in
	// use.
	hostStack []uint64
	inHost    bool
	// writeBuf gathers the buffers of one fd_write.
	writeBuf []byte
	// touched is how much of the memory is its initial memory or was
	// written once by touchGrown; all of it until Instantiate has found the
	// memory (a start function runs before).
	touched uint64
	// hot is its part in learning the module's hot pages (module.go).
	hot linearmem.Learning
}

var _ runtime.Instance = (*instance)(nil)

// rawVal is a wasmtime_val_raw_t: 16 bytes, the value little-endian at the
// start.
type rawVal struct{ lo, hi uint64 }

var (
	errInstanceClosed  = errors.New("wasmtime: instance is closed")
	errInstanceRunning = errors.New("wasmtime: instance is running (a call from one of its host functions?)")
)

func (in *instance) Function(name string) runtime.Function {
	if f, ok := in.funcs[name]; ok {
		return f
	}
	exp, ok := in.mod.funcs[name]
	if !ok || in.st == nil {
		return nil
	}
	f := &function{in: in, params: exp.Params, results: exp.Results, n: max(len(exp.Params), len(exp.Results))}
	cname := C.CString(name)
	found := C.wk_export_func(in.st, cname, C.size_t(len(name)), &f.fn)
	C.free(unsafe.Pointer(cname))
	if !found {
		return nil
	}
	in.funcs[name] = f
	return f
}

// Memory is the instance's exported "memory", nil if it exports none (as
// conformance/runtimetest requires, and wazero's plugin does).
func (in *instance) Memory() runtime.Memory {
	if in.st == nil || in.st.mem_state != C.WK_MEM_SOME {
		return nil
	}
	return &in.mem
}

// memoryView is the whole of the instance's memory; nil for none.
func (in *instance) memoryView() []byte {
	mem := in.Memory()
	if mem == nil {
		return nil
	}
	view, _ := mem.Read(0, mem.Size())
	return view
}

// hostMemory is the memory host functions see: for a guest that exports
// none, one where every range is out of bounds.
func (in *instance) hostMemory() runtime.Memory {
	if in.st.mem_state != C.WK_MEM_SOME {
		return noMemory{}
	}
	return &in.mem
}

func (in *instance) Close(context.Context) error {
	if in.st == nil {
		return nil
	}
	if in.running {
		return errInstanceRunning
	}
	in.hot.Finish(in.memoryView)
	C.wk_store_delete(in.st)
	in.st = nil
	in.raw = nil
	in.funcs = nil
	in.handle.Delete()
	return nil
}

// begin starts a stretch of guest code under ctx; end finishes it once the
// engine's exit has been called.
func (in *instance) begin(ctx context.Context) {
	in.running = true
	in.ctx = ctx
	in.interrupted = false
	in.hostErr = nil
	in.e.enter()
}

// touchGrown writes once, as host work of the running call, the memory the
// guest has grown since it last ran (ADR 1043). Wasmtime has no hook at
// memory.grow short of owning the whole memory (which would lose its
// copy-on-write image), so this runs at every epoch tick and when a call
// returns: a guest pays for the faults of what it touches of new memory
// before the next tick only.
func (in *instance) touchGrown() {
	size := uint64(in.st.mem_size)
	if size <= in.touched {
		return
	}
	grown := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(in.st.mem_base), in.touched)), size-in.touched)
	runtime.AsHostWork(in.ctx, func() { linearmem.Touch(grown) })
	in.touched = size
}

// end reports how the guest code ended: nil, or an error that says why,
// matching runtime.ErrInterrupted if the ctx stopped it.
func (in *instance) end(ctx context.Context, r C.wk_result) error {
	in.running = false
	in.ctx = nil
	if r.trap == nil && r.err == nil {
		return nil
	}
	var (
		msg    string
		code   C.int
		exited bool
	)
	if r.err != nil {
		exited = bool(C.wasmtime_error_exit_status(r.err, &code))
		msg = errorOf(r.err).Error()
	}
	if r.trap != nil {
		msg = trapOf(r.trap)
	}
	switch {
	case in.interrupted:
		return interrupted(ctx)
	case in.hostErr != nil:
		return in.hostErr
	case exited:
		// proc_exit, whatever the code: the guest is done.
		return fmt.Errorf("wasmtime: guest exited with code %d", int(code))
	}
	return fmt.Errorf("wasmtime: %s", msg)
}

func interrupted(ctx context.Context) error {
	return fmt.Errorf("wasmtime: %w: %w", runtime.ErrInterrupted, ctx.Err())
}

type function struct {
	in              *instance
	fn              C.wasmtime_func_t
	params, results []runtime.ValueType
	n               int // max(len(params), len(results))
}

var _ runtime.Function = (*function)(nil)

// Call is one cgo call (shim.c, wk_call): it sets the store's epoch deadline
// and calls the export through the C API's unchecked entry point, with the
// values in the instance's call buffer.
func (f *function) Call(ctx context.Context, stack []uint64) error {
	in := f.in
	if in.st == nil {
		return errInstanceClosed
	}
	if in.running {
		return errInstanceRunning // a store cannot be entered again from a host function
	}
	if len(stack) < f.n {
		return fmt.Errorf("wasmtime: call: stack has %d values, the function needs %d", len(stack), f.n)
	}
	if ctx.Err() != nil {
		return interrupted(ctx)
	}
	raw := in.raw
	for i := range f.params {
		raw[i].lo = stack[i]
	}
	in.begin(ctx)
	r := C.wk_call(in.st, f.fn)
	in.e.exit()
	if r.trap != nil || r.err != nil {
		in.hot.Abandon() // a failed event's pages are not a new instance's
		return in.end(ctx, r)
	}
	in.touchGrown() // what the call grew since the last tick
	in.running = false
	in.ctx = nil
	in.hot.Called(in.memoryView)
	for i, t := range f.results {
		v := raw[i].lo
		if t == runtime.I32 || t == runtime.F32 {
			v = uint64(uint32(v)) // the upper half is not the callee's
		}
		stack[i] = v
	}
	return nil
}

// memory is the instance's "memory" export. The C side keeps its base and
// size current whenever the guest is not running (shim.c,
// wk_refresh_memory), so reading them costs no cgo call.
type memory struct{ in *instance }

var _ runtime.Memory = (*memory)(nil)

func (m *memory) Read(offset, length uint32) ([]byte, bool) {
	st := m.in.st
	if st == nil || uint64(offset)+uint64(length) > uint64(st.mem_size) {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(st.mem_base), offset)), length), true
}

func (m *memory) Write(offset uint32, data []byte) bool {
	view, ok := m.Read(offset, uint32(min(len(data), 1<<32-1)))
	if !ok || len(view) != len(data) {
		return false
	}
	copy(view, data)
	return true
}

func (m *memory) Size() uint32 {
	if m.in.st == nil {
		return 0
	}
	return uint32(m.in.st.mem_size)
}

// noMemory stands for the memory of a guest that exports none: every range
// is out of bounds.
type noMemory struct{}

func (noMemory) Read(uint32, uint32) ([]byte, bool) { return nil, false }
func (noMemory) Write(uint32, []byte) bool          { return false }
func (noMemory) Size() uint32                       { return 0 }
