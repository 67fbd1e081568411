//go:build !cgo

// Package wasmtimeruntime is the runtime plugin built on Wasmtime. It needs
// cgo: this build (CGO_ENABLED=0) has only an Info that says so.
package wasmtimeruntime

import (
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Info describes the plugin as unavailable in this build.
func Info() plugin.Info {
	return plugin.Info{
		Kind:    plugin.Runtime,
		Name:    "wasmtime",
		API:     contract,
		Summary: "WebAssembly engine Wasmtime (Cranelift), through its C API; needs cgo",
		Unavailable: "this build was made with CGO_ENABLED=0; wasmtime needs cgo: " +
			"rebuild with CGO_ENABLED=1 and a C compiler (go build -tags sqlite_fts5 ./cmd/wasmkeep)",
	}
}
