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
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/spare"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// maxPages is the largest memory runtime.Memory can describe: Size is a
// uint32, and a full 4 GiB memory has 1<<32 bytes.
const maxPages = 65535

// lingerTicks is how many ticks the epoch ticker runs on after the last call
// returned, so that a stream of short calls does not wake it for each one.
const lingerTicks = 100

type engine struct {
	// opt compiles at Cranelift's opt level speed, the code modules run
	// in the end; fast, at opt level none, is where modules start while opt
	// compiles them in the background (tiering: on; nil otherwise).
	opt, fast *backend
	// background counts the compiles running in the background, which
	// Close waits for: Wasmtime cannot stop them. failOptimise, set by tests
	// only, makes them fail with its error.
	background   sync.WaitGroup
	failOptimise error
	// spares are the modules' instances made ahead (module.go), whose
	// making and freeing Close waits for.
	spares spare.Group
	// limit is MemoryLimitPages in bytes, every store's memory limit.
	limit int64
	// host are the functions the linker defines, by the index their C
	// callback is given: ours (WASI overrides) then the kernel's.
	host []hostFunc
	// hostArity is the largest max(params, results) of host.
	hostArity int
	// cacheDir is where compiled modules are kept, "" for nowhere.
	cacheDir string

	// The epoch ticker: it increments the engine's epoch every interval
	// while calls run (inflight > 0) and for lingerTicks after; ticking says
	// it is running, wake starts it.
	interval time.Duration
	inflight atomic.Int64
	ticking  atomic.Bool
	wake     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}

	closeOnce sync.Once
	closed    atomic.Bool
}

var _ runtime.Engine = (*engine)(nil)

// hostFunc is a function the linker defines. Exactly one of fn (the
// kernel's) and wasi (an override of a WASI function, which may interrupt
// the call by returning true) is set.
type hostFunc struct {
	module, name    string
	params, results []runtime.ValueType
	fn              func(context.Context, runtime.Memory, []uint64)
	wasi            func(in *instance, stack []uint64) (interrupt bool)
}

func (d *driver) NewEngine(ctx context.Context, cfg runtime.Config) (runtime.Engine, error) {
	if cfg.MemoryLimitPages == 0 || cfg.MemoryLimitPages > maxPages {
		return nil, fmt.Errorf("wasmtime: MemoryLimitPages is %d, want 1 to %d", cfg.MemoryLimitPages, maxPages)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wasmtime: %w", err)
	}
	host, err := hostFuncs(cfg)
	if err != nil {
		return nil, fmt.Errorf("wasmtime: host module %q: %w", cfg.HostModule, err)
	}
	e := &engine{
		limit:    int64(cfg.MemoryLimitPages) * 65536,
		host:     host,
		interval: d.cfg.InterruptInterval,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if e.interval <= 0 {
		e.interval = time.Millisecond
	}
	for _, hf := range host {
		e.hostArity = max(e.hostArity, len(hf.params), len(hf.results))
	}
	if cfg.CacheDir != "" {
		if e.cacheDir, err = makeCacheDir(cfg.CacheDir); err != nil {
			return nil, err
		}
	}
	opt := runtime.TierOptimised
	if d.cfg.Tiering == runtime.TieringFast {
		opt = runtime.TierFast
	}
	// With tiering, opt compiles in the background only: on one thread, so
	// that the cores are left to the guests it runs meanwhile on the fast
	// tier.
	parallel := d.cfg.ParallelCompilation && d.cfg.Tiering != runtime.TieringOn
	if e.opt, err = e.newBackend(opt, parallel); err != nil {
		return nil, err
	}
	if d.cfg.Tiering == runtime.TieringOn {
		if e.fast, err = e.newBackend(runtime.TierFast, d.cfg.ParallelCompilation); err != nil {
			e.opt.delete()
			return nil, err
		}
	}
	go e.tick()
	return e, nil
}

// backend is a Wasmtime engine and its linker: modules, their linking and
// their stores belong to one engine.
type backend struct {
	ptr    *C.wasm_engine_t
	linker *C.wasmtime_linker_t
	tier   runtime.Tier
}

// newBackend makes a Wasmtime engine whose Cranelift optimises
// (TierOptimised) or not (TierFast), with its linker.
func (e *engine) newBackend(tier runtime.Tier, parallel bool) (*backend, error) {
	b := &backend{tier: tier, ptr: C.wk_engine_new(C.bool(parallel), C.bool(tier == runtime.TierFast))}
	if b.ptr == nil {
		return nil, errors.New("wasmtime: creating the engine failed")
	}
	b.linker = C.wasmtime_linker_new(b.ptr)
	if err := e.define(b.linker); err != nil {
		b.delete()
		return nil, err
	}
	return b, nil
}

func (b *backend) delete() {
	if b != nil {
		C.wasmtime_linker_delete(b.linker)
		C.wasm_engine_delete(b.ptr)
	}
}

// hostFuncs lists what the linker defines on top of Wasmtime's WASI: our
// WASI overrides (wasi.go), then the kernel's functions.
func hostFuncs(cfg runtime.Config) ([]hostFunc, error) {
	host := append([]hostFunc(nil), wasiOverrides...)
	if len(cfg.HostFunctions) == 0 {
		return host, nil
	}
	switch cfg.HostModule {
	case "":
		return nil, errors.New("host functions need a module name")
	case runtime.WASIModule:
		return nil, errors.New("the host module cannot be WASI's")
	}
	seen := map[string]bool{}
	for _, hf := range cfg.HostFunctions {
		switch {
		case seen[hf.Name]:
			return nil, fmt.Errorf("function %q defined twice", hf.Name)
		case hf.Func == nil:
			return nil, fmt.Errorf("function %q has no Func", hf.Name)
		}
		for _, t := range append(hf.Params[:len(hf.Params):len(hf.Params)], hf.Results...) {
			if _, ok := valKinds[t]; !ok {
				return nil, fmt.Errorf("function %q: value type %v is not supported", hf.Name, t)
			}
		}
		seen[hf.Name] = true
		host = append(host, hostFunc{
			module: cfg.HostModule, name: hf.Name,
			params: hf.Params, results: hf.Results, fn: hf.Func,
		})
	}
	return host, nil
}

// valKinds maps value types to the C API's wasm_valkind_t.
var valKinds = map[runtime.ValueType]C.uint8_t{
	runtime.I32: C.WASM_I32, runtime.I64: C.WASM_I64, runtime.F32: C.WASM_F32, runtime.F64: C.WASM_F64,
}

// define fills the linker: WASI preview 1 and the host functions. One linker
// serves every store; each module resolves its imports against it once.
func (e *engine) define(linker *C.wasmtime_linker_t) error {
	if err := errorOf(C.wasmtime_linker_define_wasi(linker)); err != nil {
		return fmt.Errorf("wasmtime: defining WASI: %w", err)
	}
	for i, hf := range e.host {
		// Our WASI functions replace Wasmtime's of the same name.
		C.wasmtime_linker_allow_shadowing(linker, C.bool(hf.wasi != nil))
		params := make([]C.uint8_t, len(hf.params)+1) // never empty, so never nil
		for j, t := range hf.params {
			params[j] = valKinds[t]
		}
		results := make([]C.uint8_t, len(hf.results)+1)
		for j, t := range hf.results {
			results[j] = valKinds[t]
		}
		module, name := C.CString(hf.module), C.CString(hf.name)
		cerr := C.wk_define_func(linker, module, C.size_t(len(hf.module)), name, C.size_t(len(hf.name)),
			&params[0], C.size_t(len(hf.params)), &results[0], C.size_t(len(hf.results)), C.uintptr_t(i))
		C.free(unsafe.Pointer(module))
		C.free(unsafe.Pointer(name))
		if err := errorOf(cerr); err != nil {
			return fmt.Errorf("wasmtime: defining %s.%s: %w", hf.module, hf.name, err)
		}
	}
	C.wasmtime_linker_allow_shadowing(linker, false)
	return nil
}

// enter and exit bracket every stretch of guest code (calls and
// instantiations), so that the epoch ticks while one may be running.
func (e *engine) enter() {
	if e.inflight.Add(1) == 1 && !e.ticking.Load() {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *engine) exit() { e.inflight.Add(-1) }

// tick is the engine's epoch ticker. Every store's deadline is one tick
// after its call starts and each tick after that runs the store's deadline
// callback (shim.c, wk_epoch), which stops the guest if the call's ctx is
// done and otherwise extends the deadline by a tick.
//
// The callback is the way to stop one store among many: the epoch is the
// engine's, a store cannot be touched from another thread while it runs, and
// a deadline without a callback traps, which unwinds the guest: there is no
// resuming it, so "trap at every tick and re-enter" cannot work. The
// callback costs nothing per call (it runs only in calls longer than a
// tick), where watching each call's ctx from Go (context.AfterFunc or a
// goroutine) would cost on every call.
func (e *engine) tick() {
	defer close(e.stopped)
	t := time.NewTicker(e.interval)
	t.Stop()
	for {
		select {
		case <-e.wake:
		case <-e.stop:
			return
		}
		e.ticking.Store(true)
		t.Reset(e.interval)
		for idle := 0; idle < lingerTicks; {
			select {
			case <-t.C:
				C.wasmtime_engine_increment_epoch(e.opt.ptr)
				if e.fast != nil {
					C.wasmtime_engine_increment_epoch(e.fast.ptr)
				}
				if e.inflight.Load() == 0 {
					idle++
				} else {
					idle = 0
				}
			case <-e.stop:
				t.Stop()
				return
			}
		}
		t.Stop()
		e.ticking.Store(false)
		// A call may have started after the last look at inflight and seen
		// ticking still true: then it did not wake the ticker.
		if e.inflight.Load() > 0 {
			select {
			case e.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (e *engine) Compile(ctx context.Context, wasm []byte) (runtime.Module, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wasmtime: compile: %w", err)
	}
	// Wasmtime cannot stop a compile either: refuse, as the wazero plugin
	// does, what would take too long or too much memory, what no instance
	// could be made of, and bytes that are not a module, which Wasmtime
	// would report in its raw form.
	if err := wasmbounds.Check(wasm, uint32(e.limit>>16)); err != nil {
		return nil, fmt.Errorf("wasmtime: compile: %w", err)
	}
	if e.closed.Load() {
		return nil, errEngineClosed
	}
	// With tiering, a module starts at opt level none unless its
	// optimised code is in the cache already.
	b, ptr := e.opt, e.loadCached(wasm)
	var err error
	if ptr == nil {
		if e.fast != nil {
			b = e.fast
			ptr, err = b.compile(wasm)
		} else {
			ptr, err = e.compileAndKeep(wasm)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wasmtime: compile: %w", err)
	}
	m := newModule(e, b, ptr)
	m.start = wasmbin.HasSection(wasm, wasmbin.StartSection)
	m.newSpare()
	if l, err := linearmem.ReadLayout(wasm); err == nil {
		m.zeroFrom = int(min(l.End, 1<<32))
	}
	if b != e.fast {
		close(m.optimised)
		return m, nil
	}
	e.background.Add(1)
	go func() {
		defer e.background.Done()
		m.optimise(wasm)
	}()
	return m, nil
}

// compile compiles wasm, which wasmbounds.Check accepted (so it is not
// empty).
func (b *backend) compile(wasm []byte) (*C.wasmtime_module_t, error) {
	var ptr *C.wasmtime_module_t
	err := errorOf(C.wasmtime_module_new(b.ptr, (*C.uint8_t)(unsafe.Pointer(&wasm[0])), C.size_t(len(wasm)), &ptr))
	return ptr, err
}

// Close stops the epoch ticker and releases the engine. Modules and
// instances keep what they need of it alive.
func (e *engine) Close(context.Context) error {
	e.closeOnce.Do(func() {
		e.spares.Close()
		e.background.Wait()
		e.closed.Store(true)
		close(e.stop)
		<-e.stopped
		e.fast.delete()
		e.opt.delete()
	})
	return nil
}

var errEngineClosed = errors.New("wasmtime: engine is closed")

// errorOf turns a wasmtime_error_t into an error and deletes it.
func errorOf(err *C.wasmtime_error_t) error {
	if err == nil {
		return nil
	}
	defer C.wasmtime_error_delete(err)
	var msg C.wasm_byte_vec_t
	C.wasmtime_error_message(err, &msg)
	defer C.wasm_byte_vec_delete(&msg)
	return errors.New(tidy(C.GoStringN(msg.data, C.int(msg.size))))
}

// trapOf turns a wasm_trap_t into its message and deletes it.
func trapOf(trap *C.wasm_trap_t) string {
	defer C.wasm_trap_delete(trap)
	var msg C.wasm_byte_vec_t
	C.wasm_trap_message(trap, &msg)
	defer C.wasm_byte_vec_delete(&msg)
	return tidy(C.GoStringN(msg.data, C.int(msg.size)))
}

// maxFrames is how many frames of a wasm backtrace an error keeps.
const maxFrames = 8

// tidy makes one line of a Wasmtime error message. The C API renders errors
// in Rust's multi-line debug format:
//
//	error while executing at wasm backtrace:
//	    0:     0x41 - <unknown>!<wasm function 1>
//
//	Caused by:
//	    wasm trap: wasm `unreachable` instruction executed
//
//	Stack backtrace:
//	   ...
//
// which becomes "wasm trap: wasm `unreachable` instruction executed (wasm
// backtrace: 0: 0x41 - <unknown>!<wasm function 1>)". The host's stack
// backtrace (present when RUST_BACKTRACE is set) is dropped.
func tidy(msg string) string {
	msg = strings.TrimRight(msg, "\x00")
	msg, _, _ = strings.Cut(msg, "\n\nStack backtrace:")
	head, causes, _ := strings.Cut(msg, "\n\nCaused by:\n")
	var chain []string
	for line := range strings.Lines(causes) {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, ": "); i > 0 && strings.Trim(line[:i], "0123456789") == "" {
			line = line[i+2:] // "0: cause" in a numbered list
		}
		if line != "" {
			chain = append(chain, line)
		}
	}
	const trace = "error while executing at wasm backtrace:"
	if first, frames, ok := strings.Cut(head, "\n"); ok && strings.TrimSpace(first) == trace && len(chain) > 0 {
		var list []string
		for line := range strings.Lines(frames) {
			if f := strings.Join(strings.Fields(line), " "); f != "" {
				list = append(list, f)
			}
		}
		if len(list) > maxFrames {
			list = append(list[:maxFrames], fmt.Sprintf("%d more", len(list)-maxFrames))
		}
		return strings.Join(chain, ": ") + " (wasm backtrace: " + strings.Join(list, "; ") + ")"
	}
	head = strings.Join(strings.Fields(head), " ")
	return strings.Join(append([]string{head}, chain...), ": ")
}
