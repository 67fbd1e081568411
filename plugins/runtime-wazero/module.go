package wazeroruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/spare"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

type module struct {
	e *engine
	// code is what new instances run: the interpreter's until the
	// compiler's replaces it (tier.go). mu orders that replacement and
	// Close after instantiations in progress (held shared).
	code       atomic.Pointer[code]
	mu         sync.RWMutex
	closed     bool
	optimised  chan struct{} // closed once code will not change again
	imports    []runtime.Import
	exports    []runtime.Export // by name
	memories   map[string]bool  // exported memories
	initialize bool             // exports _initialize
	start      bool             // has a start function, which wazero runs as it instantiates
	image      *image           // the initial memory, for a module prepare took the data segments of
	spare      *spare.Spare[*instance]
}

var _ runtime.Module = (*module)(nil)

func (m *module) Imports() []runtime.Import      { return slices.Clone(m.imports) }
func (m *module) Exports() []runtime.Export      { return slices.Clone(m.exports) }
func (m *module) ExportsMemory(name string) bool { return m.memories[name] }
func (m *module) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.spare.Close()
	return errors.Join(m.code.Load().cm.Close(ctx), m.image.Close())
}

func (m *module) Instantiate(ctx context.Context, cfg runtime.InstanceConfig) (runtime.Instance, error) {
	in, err := m.spare.Get(func() (*instance, error) { return m.newInstance(ctx, cfg.RunGuest) })
	if err != nil {
		return nil, err
	}
	in.stdout.w, in.stderr.w = cfg.Stdout, cfg.Stderr
	if m.initialize {
		err := cfg.RunGuest(ctx, func(ctx context.Context) error {
			in.ctx = ctx
			defer func() { in.ctx = nil }()
			if err := in.mod.ExportedFunction("_initialize").CallWithStack(ctx, nil); err != nil {
				return fmt.Errorf("wazero: _initialize: %w", callError(ctx, err))
			}
			return nil
		})
		if err != nil {
			return nil, errors.Join(err, in.mod.Close(ctx))
		}
		// The image is mapped from its file (memory_unix.go); past it the
		// memory is anonymous.
		if in.mem != nil {
			linearmem.ReleaseAfterStart(in.memoryView(), m.image.size())
		}
	}
	// Only an instance that maps the image's file teaches which of its
	// pages events map: one that copied it has them all.
	if in.mem != nil && in.imageMapped {
		in.hot = m.image.hot.Learn(m.image.size())
	}
	return in, nil
}

// newInstance makes an instance of the module's current code, its start
// function, if it has one, run by runGuest (the kernel's, with the budget
// of an event); nothing else of the guest's runs.
func (m *module) newInstance(ctx context.Context, runGuest func(context.Context, func(context.Context) error) error) (*instance, error) {
	in := &instance{}
	mc := m.e.instance.WithStdout(&in.stdout).WithStderr(&in.stderr).WithNanosleep(in.sleep)
	instantiate := func(ctx context.Context) error {
		in.ctx = ctx
		defer func() { in.ctx = nil }()
		m.mu.RLock()
		defer m.mu.RUnlock()
		if m.closed {
			return errors.New("wazero: instantiate: the module is closed")
		}
		in.code = m.code.Load()
		mod, err := in.code.rt.InstantiateModule(withMemory(ctx, m.image, in), in.code.cm, mc)
		if err != nil {
			return fmt.Errorf("wazero: instantiate: %w", callError(ctx, err))
		}
		in.mod = mod
		return nil
	}
	var err error
	if m.start {
		err = runGuest(ctx, instantiate)
	} else {
		err = instantiate(ctx)
	}
	if err != nil {
		return nil, err
	}
	if mem := in.mod.ExportedMemory("memory"); mem != nil {
		in.mem = mem
	}
	return in, nil
}

// newSpare sets up the module's instance made ahead (ADR 1061): made in
// the background after each instance the module gives out, and in it the
// hot pages of its image (linearmem.HotPages) populated and read once, so
// that neither the instantiation nor those first accesses (on this bench's
// paravirtualised VM still about 5 µs a page populated) are on the path of
// the event that takes it. A module with a start function, guest code run
// as an instance is made, gets none.
func (m *module) newSpare() {
	if m.start {
		return
	}
	m.spare = &spare.Spare[*instance]{
		Make: func() (*instance, bool) {
			hotLearned := m.image.hotLearned()
			in, err := m.newInstance(context.Background(), nil)
			if err != nil {
				return nil, false
			}
			if in.mem != nil && in.imageMapped {
				m.image.hot.Read(in.memoryView())
			}
			in.hotLearned = hotLearned
			return in, true
		},
		// Not one made from code the module has since replaced (the
		// interpreter's), nor one made before its hot pages were learned.
		Usable: func(in *instance) bool {
			return in.code == m.code.Load() && !m.image.hotStale(in.hotLearned)
		},
		Free:  func(in *instance) { in.mod.Close(context.Background()) },
		Group: &m.e.spares,
	}
}

type instance struct {
	mod  api.Module
	code *code // what it runs
	// hotLearned says the image's hot pages were learned, and so populated,
	// when it was made.
	hotLearned bool
	// stdout and stderr are the kernel's, from when it takes the instance.
	stdout, stderr output

	mem runtime.Memory // nil if the guest exports no "memory"
	// ctx is the running call's, for sleep; the kernel never calls into an
	// instance concurrently, and WASI runs on the caller's goroutine.
	ctx context.Context
	// hot is its part in learning the image's hot pages (memory.go), from
	// after its start; imageMapped says its memory maps the image's file.
	hot         linearmem.Learning
	imageMapped bool
	// funcs caches Function from a name's second lookup: each api.Function
	// is a call engine of its own (about 1 KiB; upstream wazero adds a 10
	// KiB call stack, which the patched copy lends from a pool for each
	// call), which the kernel, asking for its hook on every event, would
	// otherwise allocate every time; a hook run once in an instance's life
	// (on-init) would keep one for as long as the actor is resident. A name
	// looked up once maps to nil.
	funcs map[string]*function
}

var _ runtime.Instance = (*instance)(nil)

func (in *instance) Function(name string) runtime.Function {
	f, again := in.funcs[name]
	if f != nil {
		return f
	}
	fn := in.mod.ExportedFunction(name)
	if fn == nil {
		return nil
	}
	f = &function{fn: fn, in: in}
	if in.funcs == nil {
		in.funcs = map[string]*function{}
	}
	if again {
		in.funcs[name] = f
	} else {
		in.funcs[name] = nil
	}
	return f
}

func (in *instance) Memory() runtime.Memory { return in.mem }
func (in *instance) Close(ctx context.Context) error {
	if in.mod.IsClosed() {
		// A stopped call closed it, memory and all: its addresses may be
		// another mapping's by now.
		in.hot.Abandon()
	} else {
		in.hot.Finish(in.memoryView)
	}
	return in.mod.Close(ctx)
}

// memoryView is the whole of the instance's memory.
func (in *instance) memoryView() []byte {
	view, _ := in.mem.Read(0, in.mem.Size())
	return view
}

// sleep is WASI's sleep (poll_oneoff on a clock). wazero's own would hold a
// stopped guest for the whole timeout; this one wakes when the running call's
// ctx is done and unwinds the guest as proc_exit does, with the exit code
// wazero gives a stop on that ctx (wazero closes the instance meanwhile).
func (in *instance) sleep(ns int64) {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	stopped := false
	runtime.AsWait(in.ctx, func() {
		select {
		case <-t.C:
		case <-in.ctx.Done():
			stopped = true
		}
	})
	if stopped {
		code := sys.ExitCodeContextCanceled
		if errors.Is(in.ctx.Err(), context.DeadlineExceeded) {
			code = sys.ExitCodeDeadlineExceeded
		}
		panic(sys.NewExitError(code))
	}
}

type function struct {
	fn api.Function
	in *instance
}

var _ runtime.Function = (*function)(nil)

func (f *function) Call(ctx context.Context, stack []uint64) error {
	f.in.ctx = ctx
	err := f.fn.CallWithStack(ctx, stack)
	f.in.ctx = nil
	if err != nil {
		f.in.hot.Abandon() // a failed event's pages are not a new instance's
		return callError(ctx, err)
	}
	f.in.hot.Called(f.in.memoryView)
	return nil
}

// callError describes a failed call. wazero reports a stop on ctx and
// proc_exit alike, as a *sys.ExitError: the reserved exit codes mean the ctx
// stopped the guest only if it is done (a guest may pass them to proc_exit).
// Traps and host panics keep wazero's error, which wraps the panic value.
func callError(ctx context.Context, err error) error {
	var exit *sys.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	code := exit.ExitCode()
	if ctx.Err() != nil && (code == sys.ExitCodeDeadlineExceeded || code == sys.ExitCodeContextCanceled) {
		return fmt.Errorf("%w: %w", runtime.ErrInterrupted, err)
	}
	return fmt.Errorf("guest exited: %w", err)
}

// output is an instance's stdout or stderr: the writer the kernel gives
// when it takes the instance (nil discards).
type output struct{ w io.Writer }

func (o *output) Write(p []byte) (int, error) {
	if o.w == nil {
		return len(p), nil
	}
	return o.w.Write(p)
}
