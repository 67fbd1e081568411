// Package wazeroruntime is the runtime plugin (runtime/v1) built on wazero,
// a WebAssembly engine written in pure Go: no cgo, compiled to machine code
// on amd64 and arm64, interpreted elsewhere.
package wazeroruntime

import (
	"fmt"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Config is the plugin's section of plugins.yaml.
type Config struct {
	// Compiler compiles guests to machine code where wazero can (amd64,
	// arm64) and interprets them elsewhere. False always interprets: compiles
	// are faster but calls are much slower; for debugging.
	Compiler bool `koanf:"compiler"`
	// Tiering is how a module starts with the compiler on (ADR 1034):
	//   - "on": on the interpreter at once while the compiler compiles it in
	//     the background; its new instances get the compiled code when
	//     ready, instances already running keep the interpreter's. A module
	//     whose compiled code is already in the cache starts compiled.
	//   - "auto": as on for a module of at least minTieredSize bytes of
	//     code (a Go guest), whose compile takes long; as off for a smaller
	//     one, which compiles in tens of milliseconds.
	//   - "off": wait for the compiler.
	//   - "fast": interpret only, as compiler: false does (to compare or
	//     test the tiers).
	Tiering string `koanf:"tiering"`
}

// minTieredSize is the smallest module, in bytes once prepared (its data
// segments taken out), that tiering auto starts on the interpreter: wazero
// compiles about 3 MB of code a second on a core (a 2.4 MB Go guest in
// 0.87 s of CPU, a 29 KB C guest in 18 ms), so this takes about 90 ms
// (ADR 1034).
const minTieredSize = 256 << 10

// contract is the runtime contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/runtime: the kernel refuses a plugin whose version is not its own
// (ADR 1002).
const contract = "runtime/v2"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Runtime,
		Name:      "wazero",
		API:       contract,
		Summary:   "WebAssembly engine in pure Go (wazero)",
		NewConfig: func() any { return &Config{Compiler: true, Tiering: runtime.TieringOff} },
		New: func(config any) (any, error) {
			c, ok := config.(*Config)
			if !ok {
				return nil, fmt.Errorf("configuration is %T, want *wazeroruntime.Config", config)
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
