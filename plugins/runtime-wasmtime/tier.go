//go:build cgo

package wasmtimeruntime

/*
#include "shim.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

var _ runtime.Tiered = (*module)(nil)

func (m *module) Tier() runtime.Tier {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.b.tier
}

func (m *module) Optimised() <-chan struct{} { return m.optimised }

// optimise compiles wasm at opt level speed, keeps it in the cache and
// gives it to the module's new instances; instances already made keep the
// code they have (each store holds its module's code). A failure is logged
// and leaves the module at opt level none.
func (m *module) optimise(wasm []byte) {
	defer close(m.optimised)
	start := time.Now()
	var ptr *C.wasmtime_module_t
	err := m.e.failOptimise
	if err == nil {
		ptr, err = m.e.compileAndKeep(wasm)
	}
	if err != nil {
		sum := sha256.Sum256(wasm)
		slog.Warn("wasmtime: compiling at opt level speed in the background failed; the module stays at opt level none",
			"module", hex.EncodeToString(sum[:8]), "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.ptr = ptr
		m.release()
		return
	}
	m.release()
	m.b, m.ptr, m.preErr = m.e.opt, ptr, nil
	slog.Debug("wasmtime: module compiled at opt level speed in the background",
		"took", time.Since(start).Round(time.Millisecond))
}
