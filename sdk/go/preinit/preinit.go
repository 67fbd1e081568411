// Package preinit asks WasmKeep to pre-initialise the actor's module (ADR
// 1040, docs/abi.md): a node runs the module's start once, the Go runtime's
// and every package's init, and starts each instance from the memory it
// left, so that an actor's first event skips them and the pages they wrote
// are shared between actors. Import it for its effect:
//
//	import _ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
//
// Only for a module whose init may be shared: every instance then starts
// with the same state, random state included, and the node keeps that state
// in its cache directory for its next starts. math/rand's and math/rand/v2's
// top-level functions give every actor of the class the same sequence, and
// anything init read once (bytes from crypto/rand, a key, time.Now) is the
// same in every actor and stays on disk; crypto/rand called in a handler
// asks the host each time, so read keys and ids there. An init that calls
// the host (wasmkeep's functions; WASI is fine) makes the node serve the
// module without pre-initialising it, saying why in its log.
package preinit

// marker is never called: the node looks for the export.
//
//go:wasmexport wasmkeep_preinit
func marker() {}
