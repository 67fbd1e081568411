//go:build cgo

package wasmtimeruntime

// The Go side of the C callbacks in shim.c. Each runs on the goroutine whose
// Function.Call is running the guest. A Go panic must not unwind through the
// C and Wasmtime frames below, so each recovers its own.

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime/cgo"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// wkHostCall runs host function index for the guest. vals holds the
// parameters on entry and the results on return. A nonzero result makes the
// guest trap; the instance keeps the reason.
//
//export wkHostCall
func wkHostCall(h, index C.uintptr_t, vals *C.wasmtime_val_raw_t, n C.size_t) (rc C.int) {
	in := cgo.Handle(h).Value().(*instance)
	hf := &in.e.host[index]
	raw := unsafe.Slice((*rawVal)(unsafe.Pointer(vals)), int(n))
	var stack []uint64
	if in.inHost {
		stack = make([]uint64, max(len(hf.params), len(hf.results)))
	} else {
		stack = in.hostStack[:max(len(hf.params), len(hf.results))]
		in.inHost = true
	}
	for i, t := range hf.params {
		v := raw[i].lo
		if t == runtime.I32 || t == runtime.F32 {
			v = uint64(uint32(v))
		}
		stack[i] = v
	}
	defer func() {
		in.inHost = false
		if p := recover(); p != nil {
			in.hostErr = hostPanic(hf, p)
			rc = 1
		}
	}()
	if hf.wasi != nil {
		if hf.wasi(in, stack) {
			in.interrupted = true
			return 1
		}
	} else {
		ctx := in.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		hf.fn(ctx, in.hostMemory(), stack)
	}
	for i := range hf.results {
		raw[i].lo = stack[i]
	}
	return 0
}

// hostPanic is the error of a call whose host function panicked with p.
func hostPanic(hf *hostFunc, p any) error {
	if err, ok := p.(error); ok {
		return fmt.Errorf("wasmtime: host function %s.%s: %w", hf.module, hf.name, err)
	}
	return fmt.Errorf("wasmtime: host function %s.%s panicked: %v", hf.module, hf.name, p)
}

// wkEpochTick says whether the running call's ctx is done (nonzero), which
// stops the guest; else it touches the memory the guest grew.
//
//export wkEpochTick
func wkEpochTick(h C.uintptr_t) C.int {
	in := cgo.Handle(h).Value().(*instance)
	if in.ctx != nil && in.ctx.Err() != nil {
		in.interrupted = true
		return 1
	}
	in.touchGrown()
	return 0
}
