package runtimetest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Compile refuses promptly, with the same message on every engine, a module
// that would take too long or too much memory to compile (wasmbounds): here
// the two of issue 12, 100,000 nested blocks (minutes on wazero) and one
// function of 22 MB (1.38 GB), past the bounds on code and on one
// function's size. Bytes that are not a module get
// the same clear message too.
func testCompileBounds(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	const nested = 100000
	nest := &wasmModule{}
	nest.function("f", sig(""), nil, bytes.Repeat([]byte{opBlock, blockVoid}, nested), bytes.Repeat([]byte{opEnd}, nested))
	big := &wasmModule{}
	big.function("f", sig(""), nil, bytes.Repeat([]byte{0x01}, 22<<20)) // nop
	function := &wasmModule{}
	function.function("f", sig(""), nil, bytes.Repeat([]byte{0x01}, 2<<20))
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"100,000 nested blocks", nest.bytes(), fmt.Sprintf("function 0: more than %d blocks", wasmbounds.MaxBlocks)},
		{"a 22 MB function", big.bytes(), fmt.Sprintf("at most %d allowed", wasmbounds.MaxCodeSize)},
		{"a 2 MiB function", function.bytes(), fmt.Sprintf("at most %d allowed", wasmbounds.MaxFunctionSize)},
		{"not wasm", []byte("hello, world"), wasmbounds.ErrNotWasm.Error()},
	} {
		start := time.Now()
		m, err := e.Compile(t.Context(), tc.wasm)
		took := time.Since(start)
		if err == nil {
			m.Close(t.Context())
			t.Errorf("%s: compiled in %v, want it refused", tc.name, took)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || took > promptly {
			t.Errorf("%s: refused in %v with %q, want within %v an error containing %q", tc.name, took, err, promptly, tc.want)
		}
	}
}

// Every function of WASI preview 1 is provided with the signature
// runtime.WASIPreview1 gives it: a module importing them all so
// instantiates, and Imports reports those signatures.
func testWASIPreview1(t *testing.T, h *harness) {
	m := &wasmModule{}
	names := slices.Sorted(maps.Keys(runtime.WASIPreview1))
	for _, name := range names {
		m.importFunc(wasiModule, name, runtime.WASIPreview1[name])
	}
	mod := compile(t, h.engine(t, runtime.Config{}), m.bytes())
	for _, im := range mod.Imports() {
		if want := runtime.WASIPreview1[im.Name]; fmt.Sprint(im.Signature) != fmt.Sprint(want) {
			t.Errorf("Imports: %s.%s has %v, want %v", im.Module, im.Name, im.Signature, want)
		}
	}
	instantiate(t, mod, runtime.InstanceConfig{})
}
