//go:build cgo

package wasmtimeruntime

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/spare"
	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

type module struct {
	e        *engine
	imports  []runtime.Import
	exports  []runtime.Export          // functions, by name
	funcs    map[string]runtime.Export // the same, by name
	memories map[string]bool           // exported memories
	// arity is the largest max(params, results) of the exports: the size of
	// each instance's call buffer.
	arity      int
	initialize bool // exports a function _initialize
	start      bool // has a start function, which Wasmtime runs as it instantiates
	// zeroFrom is where the module's data ends in its memory, past which
	// the memory starts as zeros in an anonymous mapping (Wasmtime's
	// copy-on-write image covers the data only); -1 if unknown. Zero pages
	// there can be dropped: they read as zeros again, where below zeroFrom
	// they could read as the image's bytes.
	zeroFrom int
	// hot is the pages a new instance's first events map, learned from the
	// first instance to finish its calls and populated in every later one.
	hot linearmem.HotPages

	// mu guards b, ptr and pre against Close and the switch to optimised
	// code (tier.go): instantiations hold it shared. b is the backend ptr
	// was compiled on.
	mu  sync.RWMutex
	b   *backend
	ptr *C.wasmtime_module_t
	// optimised is closed once b will not change again.
	optimised chan struct{}
	closed    bool
	// pre is the module with its imports resolved against the engine's
	// linker, made by the first Instantiate under preMu; preErr is why that
	// failed.
	preMu  sync.Mutex
	pre    *C.wasmtime_instance_pre_t
	preErr error

	spare *spare.Spare[*instance]
}

var _ runtime.Module = (*module)(nil)

func newModule(e *engine, b *backend, ptr *C.wasmtime_module_t) *module {
	m := &module{e: e, b: b, ptr: ptr, optimised: make(chan struct{}), funcs: map[string]runtime.Export{}, memories: map[string]bool{}, arity: 1, zeroFrom: -1}

	var imps C.wasm_importtype_vec_t
	C.wasmtime_module_imports(ptr, &imps)
	for _, it := range unsafe.Slice(imps.data, int(imps.size)) {
		imp := runtime.Import{Module: goName(C.wasm_importtype_module(it)), Name: goName(C.wasm_importtype_name(it))}
		if ty := C.wasm_importtype_type(it); C.wasm_externtype_kind(ty) == C.WASM_EXTERN_FUNC {
			imp.IsFunc = true
			imp.Signature = signature(C.wasm_externtype_as_functype_const(ty))
		}
		m.imports = append(m.imports, imp)
	}
	C.wasm_importtype_vec_delete(&imps)

	var exps C.wasm_exporttype_vec_t
	C.wasmtime_module_exports(ptr, &exps)
	for _, et := range unsafe.Slice(exps.data, int(exps.size)) {
		name := goName(C.wasm_exporttype_name(et))
		switch ty := C.wasm_exporttype_type(et); C.wasm_externtype_kind(ty) {
		case C.WASM_EXTERN_FUNC:
			exp := runtime.Export{Name: name, Signature: signature(C.wasm_externtype_as_functype_const(ty))}
			m.exports = append(m.exports, exp)
			m.funcs[name] = exp
			m.arity = max(m.arity, len(exp.Params), len(exp.Results))
			m.initialize = m.initialize || name == "_initialize"
		case C.WASM_EXTERN_MEMORY:
			m.memories[name] = true
		}
	}
	C.wasm_exporttype_vec_delete(&exps)
	slices.SortFunc(m.exports, func(a, b runtime.Export) int { return strings.Compare(a.Name, b.Name) })
	return m
}

func goName(n *C.wasm_name_t) string {
	if n == nil || n.size == 0 {
		return ""
	}
	return C.GoStringN(n.data, C.int(n.size))
}

func signature(ft *C.wasm_functype_t) runtime.Signature {
	return runtime.Signature{
		Params:  valueTypes(C.wasm_functype_params(ft)),
		Results: valueTypes(C.wasm_functype_results(ft)),
	}
}

func valueTypes(v *C.wasm_valtype_vec_t) []runtime.ValueType {
	out := make([]runtime.ValueType, 0, int(v.size))
	for _, vt := range unsafe.Slice(v.data, int(v.size)) {
		out = append(out, valueType(C.wasm_valtype_kind(vt)))
	}
	return out
}

// valueType maps a wasm_valkind_t to the binary format's type byte, which is
// what runtime.ValueType holds (the contract names only the numeric types).
func valueType(k C.uint8_t) runtime.ValueType {
	switch k {
	case C.WASM_I32:
		return runtime.I32
	case C.WASM_I64:
		return runtime.I64
	case C.WASM_F32:
		return runtime.F32
	case C.WASM_F64:
		return runtime.F64
	case C.WASMTIME_V128:
		return 0x7b
	case C.WASM_EXTERNREF:
		return 0x6f
	case C.WASM_FUNCREF:
		return 0x70
	}
	return 0
}

func (m *module) Imports() []runtime.Import      { return slices.Clone(m.imports) }
func (m *module) Exports() []runtime.Export      { return slices.Clone(m.exports) }
func (m *module) ExportsMemory(name string) bool { return m.memories[name] }

// Close releases the module and the instance made ahead. Its instances
// keep the compiled code alive.
func (m *module) Close(context.Context) error {
	m.spare.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.release()
	return nil
}

// release deletes ptr and pre; the caller holds mu.
func (m *module) release() {
	if m.pre != nil {
		C.wasmtime_instance_pre_delete(m.pre)
		m.pre = nil
	}
	if m.ptr != nil {
		C.wasmtime_module_delete(m.ptr)
		m.ptr = nil
	}
}

var errModuleClosed = errors.New("wasmtime: module is closed")

// instancePre returns the module with its imports resolved, made once. The
// caller holds m.mu shared, so Close waits.
func (m *module) instancePre() (*C.wasmtime_instance_pre_t, error) {
	if m.ptr == nil {
		return nil, errModuleClosed
	}
	m.preMu.Lock()
	defer m.preMu.Unlock()
	if m.pre == nil && m.preErr == nil {
		if m.e.closed.Load() {
			return nil, errEngineClosed
		}
		m.preErr = errorOf(C.wasmtime_linker_instantiate_pre(m.b.linker, m.ptr, &m.pre))
	}
	return m.pre, m.preErr
}

func (m *module) Instantiate(ctx context.Context, cfg runtime.InstanceConfig) (runtime.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wasmtime: instantiate: %w: %w", runtime.ErrInterrupted, err)
	}
	in, err := m.spare.Get(func() (*instance, error) { return m.newInstance(ctx, cfg.RunGuest) })
	if err != nil {
		return nil, err
	}
	in.stdout, in.stderr = cfg.Stdout, cfg.Stderr
	if m.initialize {
		if f := in.Function("_initialize"); f != nil {
			err := cfg.RunGuest(ctx, func(ctx context.Context) error {
				if err := f.Call(ctx, make([]uint64, m.arity)); err != nil {
					return fmt.Errorf("wasmtime: _initialize: %w", err)
				}
				return nil
			})
			if err != nil {
				in.Close(ctx)
				return nil, err
			}
		}
		// Past zeroFrom the memory is anonymous.
		if in.Memory() != nil && m.zeroFrom >= 0 {
			linearmem.ReleaseAfterStart(in.memoryView(), m.zeroFrom)
		}
	}
	// Learned from after the start, as on wazero.
	if in.Memory() != nil && m.zeroFrom > 0 {
		in.hot = m.hot.Learn(m.zeroFrom)
	}
	return in, nil
}

// newInstance makes an instance in a store of its own, its start
// function, if it has one, run by runGuest (the kernel's, with the budget
// of an event); nothing else of the guest's runs.
func (m *module) newInstance(ctx context.Context, runGuest func(context.Context, func(context.Context) error) error) (*instance, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	pre, err := m.instancePre()
	if err != nil {
		return nil, fmt.Errorf("wasmtime: instantiate: %w", err)
	}

	e := m.e
	if e.closed.Load() {
		return nil, errEngineClosed
	}
	in := &instance{e: e, mod: m, code: m.b, funcs: map[string]*function{}, touched: ^uint64(0)}
	in.mem.in = in
	in.handle = cgo.NewHandle(in)
	in.st = C.wk_store_new(m.b.ptr, C.uintptr_t(in.handle), C.int64_t(e.limit),
		wasmbounds.MaxTableElements, wasmbounds.MaxTables, C.size_t(m.arity))
	if in.st == nil {
		in.handle.Delete()
		return nil, errors.New("wasmtime: instantiate: out of memory")
	}
	in.raw = unsafe.Slice((*rawVal)(unsafe.Pointer(in.st.raw)), int(in.st.raw_len))
	in.hostStack = make([]uint64, e.hostArity)
	if err := errorOf(C.wk_set_wasi(in.st)); err != nil {
		in.Close(ctx)
		return nil, fmt.Errorf("wasmtime: instantiate: WASI: %w", err)
	}

	instantiate := func(ctx context.Context) error {
		in.begin(ctx)
		r := C.wk_instantiate(in.st, pre)
		e.exit()
		if err := in.end(ctx, r); err != nil {
			return fmt.Errorf("wasmtime: instantiate: %w", err)
		}
		return nil
	}
	if m.start {
		err = runGuest(ctx, instantiate)
	} else {
		err = instantiate(ctx)
	}
	if err != nil {
		in.Close(ctx)
		return nil, err
	}
	C.wk_find_memory(in.st)
	in.touched = uint64(in.st.mem_size)
	// Wasmtime maps the module's data from one memory file per module up
	// to zeroFrom, its last page whole: reads there map only the page read
	// (ADR 1059). The range is rounded up, so the mapping is registered
	// whole rather than split in two at its last page.
	// The pages the teaching instance mapped are mapped at once
	// (linearmem.HotPages): after a start function, before _initialize.
	if mem := in.Memory(); mem != nil && m.zeroFrom > 0 {
		const page = 4096
		view, _ := mem.Read(0, uint32(min((uint64(m.zeroFrom)+page-1)/page*page, uint64(mem.Size()))))
		linearmem.NoFaultAround(view) // else the kernel's default
		m.hot.Populate(in.memoryView())
	}
	return in, nil
}

// newSpare sets up the instance the module makes ahead, as wazero's plugin
// does (ADR 1061): up to _initialize, its hot pages read once; none for a
// module with a start function.
func (m *module) newSpare() {
	if m.start {
		return
	}
	m.spare = &spare.Spare[*instance]{
		Make: func() (*instance, bool) {
			hotLearned := m.hot.Learned()
			in, err := m.newInstance(context.Background(), nil)
			if err != nil {
				return nil, false
			}
			m.hot.Read(in.memoryView())
			in.hotLearned = hotLearned
			return in, true
		},
		// Not one made from code the module has since replaced (opt level
		// none's), nor one made before its hot pages were learned.
		Usable: func(in *instance) bool {
			m.mu.RLock()
			current := in.code == m.b
			m.mu.RUnlock()
			return current && !m.hot.Stale(in.hotLearned)
		},
		Free:  func(in *instance) { in.Close(context.Background()) },
		Group: &m.e.spares,
	}
}
