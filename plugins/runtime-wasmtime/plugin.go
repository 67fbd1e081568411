//go:build cgo

// Package wasmtimeruntime is the runtime plugin (runtime/v1) built on
// Wasmtime, through the C API that github.com/bytecodealliance/wasmtime-go
// ships and links (a static libwasmtime). It needs cgo; a CGO_ENABLED=0 build
// has only an Info that says so.
//
// The package calls the C API itself rather than the Go wrapper: the
// wrapper's Func.Call and its reflection-based host functions cost several
// microseconds per call, and it offers neither the epoch deadline callback
// (to stop one store when its ctx is done) nor custom WASI stdout and stderr
// (to reach an io.Writer). See README.md.
package wasmtimeruntime

import (
	"fmt"
	"time"

	// The Go wrapper is imported for its cgo directives only: they link
	// build/<os>-<arch>/libwasmtime.a, whose C API this package calls.
	_ "github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Config is the plugin's section of plugins.yaml.
type Config struct {
	// InterruptInterval is how often a running guest checks whether its
	// call's ctx is done: the engine's epoch ticks at this interval while a
	// call is running. A stopped guest returns within about one interval.
	InterruptInterval time.Duration `koanf:"interrupt_interval"`
	// ParallelCompilation compiles a module's functions on several threads.
	// False compiles on the calling goroutine's thread only, which leaves the
	// other cores to running guests. With tiering on it applies to the fast
	// tier's compile, which a start waits for; the background compile always
	// runs on one thread.
	ParallelCompilation bool `koanf:"parallel_compilation"`
	// Tiering is how a module starts (ADR 1034):
	//   - "on": compiled at Cranelift's opt level none and run at once,
	//     while it is compiled at opt level speed in the background; its new
	//     instances get that code when ready, instances already running keep
	//     theirs. A module whose optimised code is already in the cache
	//     starts with it.
	//   - "auto": as off. Opt level none saves Wasmtime 39 about an eighth
	//     of a compile (regalloc and emission remain), too little to be
	//     worth compiling twice; Winch, the fast tier that would be, is not
	//     in its C API.
	//   - "off": wait for opt level speed.
	//   - "fast": opt level none only (to compare or test the tiers).
	Tiering string `koanf:"tiering"`
}

// Limits of InterruptInterval: a shorter interval costs CPU while guests
// run, a longer one lets a stopped guest run on.
const (
	minInterruptInterval = 100 * time.Microsecond
	maxInterruptInterval = time.Second
)

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:    plugin.Runtime,
		Name:    "wasmtime",
		API:     contract,
		Summary: "WebAssembly engine Wasmtime (Cranelift), through its C API; needs cgo",
		// An instance's tables are allocated zeroed and filled lazily: a
		// Go guest's leaves about 45 KiB untouched (ADR 1067).
		SparseCHeap: true,
		NewConfig: func() any {
			return &Config{InterruptInterval: time.Millisecond, ParallelCompilation: true, Tiering: runtime.TieringOff}
		},
		New: func(config any) (any, error) {
			c, ok := config.(*Config)
			if !ok {
				return nil, fmt.Errorf("configuration is %T, want *wasmtimeruntime.Config", config)
			}
			if c.InterruptInterval < minInterruptInterval || c.InterruptInterval > maxInterruptInterval {
				return nil, fmt.Errorf("interrupt_interval is %v, want %v to %v",
					c.InterruptInterval, minInterruptInterval, maxInterruptInterval)
			}
			if err := runtime.CheckTiering(c.Tiering); err != nil {
				return nil, err
			}
			return &driver{cfg: *c}, nil
		},
	}
}

type driver struct{ cfg Config }

var _ runtime.Driver = (*driver)(nil)
