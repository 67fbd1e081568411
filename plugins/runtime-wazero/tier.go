package wazeroruntime

import (
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// code is a module compiled by one of the engine's runtimes.
type code struct {
	rt   wazero.Runtime
	cm   wazero.CompiledModule
	tier runtime.Tier
}

var _ runtime.Tiered = (*module)(nil)

func (m *module) Tier() runtime.Tier         { return m.code.Load().tier }
func (m *module) Optimised() <-chan struct{} { return m.optimised }

// optimise compiles wasm (the prepared module, whose SHA-256 is sum) on the
// engine's compiler and gives the code to the module's new instances. A
// failure is logged and leaves the module on the interpreter.
func (m *module) optimise(wasm []byte, sum [32]byte) {
	defer close(m.optimised)
	ctx := context.Background()
	start := time.Now()
	cm, err := m.e.compileOptimised(ctx, wasm)
	if err != nil {
		slog.Warn("wazero: compiling in the background failed; the module stays on the interpreter",
			"module", hex.EncodeToString(sum[:8]), "err", err)
		return
	}
	// The cache has the code now, even if the module was closed meanwhile.
	m.e.markCompiled(sum)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		cm.Close(ctx)
		return
	}
	old := m.code.Swap(&code{rt: m.e.rt, cm: cm, tier: runtime.TierOptimised})
	m.mu.Unlock()
	// Instances of the old code keep running: wazero lets a compiled
	// module close under them.
	old.cm.Close(ctx)
	slog.Debug("wazero: module compiled in the background", "module", hex.EncodeToString(sum[:8]),
		"took", time.Since(start).Round(time.Millisecond))
}

// The cache's entries are named by keys wazero computes and does not
// export, so the engine keeps a mark of its own, an empty file named after
// the prepared module's SHA-256 under <cache>/tiered, for each module it
// compiled in the background: a module with a mark starts compiled, from
// the cache. purge removes the marks with the entries.

func (e *engine) markPath(sum [32]byte) string {
	return filepath.Join(e.cacheDir, "tiered", hex.EncodeToString(sum[:]))
}

// compiled reports whether the module whose SHA-256 is sum has its compiled
// code in the cache.
func (e *engine) compiled(sum [32]byte) bool {
	if e.cacheDir == "" {
		return false
	}
	_, err := os.Stat(e.markPath(sum))
	return err == nil
}

func (e *engine) markCompiled(sum [32]byte) {
	if e.cacheDir == "" {
		return
	}
	path := e.markPath(sum)
	// A missing mark costs one start on the interpreter: nothing to report.
	if os.MkdirAll(filepath.Dir(path), 0o700) == nil {
		os.WriteFile(path, nil, 0o600)
	}
}

func (e *engine) compileOptimised(ctx context.Context, wasm []byte) (wazero.CompiledModule, error) {
	if e.failOptimise != nil {
		return nil, e.failOptimise
	}
	return e.compile(ctx, wasm)
}
