// Package runtimetest holds the rules of runtime/v1 that every engine must
// pass. An engine's tests call Run with a constructor of its driver:
//
//	func TestConformance(t *testing.T) {
//		runtimetest.Run(t, func(t *testing.T) runtime.Driver { return newDriver() })
//	}
//
// Benchmark measures an engine's hot paths the same way for every engine.
//
// The rules are in calls.go (compiling, calling, host functions, failures),
// limits.go (interruption, memory, the compilation cache), bounds.go (what
// compiling refuses, WASI's signatures) and wasi.go. The
// guests are tiny modules this package writes (guests.go, wasm.go) plus one
// built from Go source with the local toolchain (goguest.go), so the suite
// needs no assembler. It never looks at an engine's internals: every rule is
// checked through the contract alone.
package runtimetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// limitPages is the suite's MemoryLimitPages unless a test says otherwise.
const limitPages = 16

// promptly bounds how long a stopped guest may take to return. The contract
// asks for milliseconds; the bound is loose so a loaded machine does not fail
// the suite: the rule checked is that the call returns at all.
const promptly = 5 * time.Second

// Run runs the suite against the driver newDriver returns.
func Run(t *testing.T, newDriver func(t *testing.T) runtime.Driver) {
	h := &harness{newDriver: newDriver}
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *harness)
	}{
		{"CompileInstantiateCall", testCompileInstantiateCall},
		{"InvalidModule", testInvalidModule},
		{"CompileBounds", testCompileBounds},
		{"WASIPreview1", testWASIPreview1},
		{"ImportsExports", testImportsExports},
		{"InstancesIsolated", testInstancesIsolated},
		{"InstanceOutlivesModule", testInstanceOutlivesModule},
		{"HostFunctionRoundTrip", testHostFunctionRoundTrip},
		{"HostFunctionPanic", testHostFunctionPanic},
		{"Traps", testTraps},
		{"StackOverflow", testStackOverflow},
		{"Interrupt", testInterrupt},
		{"MemoryLimit", testMemoryLimit},
		{"MemoryGrowthIsHostWork", testMemoryGrowthIsHostWork},
		{"SleepIsAWait", testSleepIsAWait},
		{"InstantiateGuest", testInstantiateGuest},
		{"Stdio", testStdio},
		{"Clocks", testClocks},
		{"Random", testRandom},
		{"NoFilesystem", testNoFilesystem},
		{"NoSockets", testNoSockets},
		{"NoArgsOrEnviron", testNoArgsOrEnviron},
		{"ProcExit", testProcExit},
		{"CompileCache", testCompileCache},
		{"Concurrency", testConcurrency},
		{"GoReactor", testGoReactor},
		{"TierSwitch", testTierSwitch},
		{"TierCacheAfterClose", testTierCacheAfterClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, h)
		})
	}
}

type harness struct {
	newDriver func(t *testing.T) runtime.Driver
}

// engine creates an engine closed when t ends, with cfg's zero fields set to
// the suite's defaults.
func (h *harness) engine(t *testing.T, cfg runtime.Config) runtime.Engine {
	t.Helper()
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = limitPages
	}
	if cfg.HostModule == "" {
		cfg.HostModule = hostModule
	}
	e, err := h.newDriver(t).NewEngine(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Engine.Close: %v", err)
		}
	})
	return e
}

// compile compiles wasm on e; the module is closed when t ends.
func compile(t *testing.T, e runtime.Engine, wasm []byte) runtime.Module {
	t.Helper()
	m, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("Module.Close: %v", err)
		}
	})
	return m
}

// instantiate instantiates m; the instance is closed when t ends.
func instantiate(t *testing.T, m runtime.Module, cfg runtime.InstanceConfig) runtime.Instance {
	t.Helper()
	in, err := m.Instantiate(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	t.Cleanup(func() {
		if err := in.Close(context.Background()); err != nil {
			t.Errorf("Instance.Close: %v", err)
		}
	})
	return in
}

// start compiles and instantiates wasm on a new engine with cfg.
func (h *harness) start(t *testing.T, cfg runtime.Config, wasm []byte) runtime.Instance {
	t.Helper()
	return startOn(t, h.engine(t, cfg), wasm)
}

// startOn compiles and instantiates wasm on e.
func startOn(t *testing.T, e runtime.Engine, wasm []byte) runtime.Instance {
	t.Helper()
	return instantiate(t, compile(t, e, wasm), runtime.InstanceConfig{})
}

// tryCall calls export name with args on a stack long enough for any of the
// suite's functions and returns the stack.
func tryCall(ctx context.Context, in runtime.Instance, name string, args ...uint64) ([]uint64, error) {
	f := in.Function(name)
	if f == nil {
		return nil, fmt.Errorf("instance has no function %q", name)
	}
	stack := make([]uint64, max(len(args), 4))
	copy(stack, args)
	return stack, f.Call(ctx, stack)
}

// call is tryCall that fails the test on an error.
func call(t *testing.T, in runtime.Instance, name string, args ...uint64) []uint64 {
	t.Helper()
	stack, err := tryCall(t.Context(), in, name, args...)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return stack
}

// errno calls a WASI function forwarded by wasiGuest and returns its errno.
func errno(t *testing.T, in runtime.Instance, name string, args ...uint64) uint32 {
	t.Helper()
	return uint32(call(t, in, name, args...)[0])
}

// i32 encodes an i32 argument.
func i32(v int32) uint64 { return uint64(uint32(v)) }

func write(t *testing.T, in runtime.Instance, offset uint32, data []byte) {
	t.Helper()
	if !in.Memory().Write(offset, data) {
		t.Fatalf("Memory.Write(%d, %d bytes) failed", offset, len(data))
	}
}

func read(t *testing.T, in runtime.Instance, offset, length uint32) []byte {
	t.Helper()
	b, ok := in.Memory().Read(offset, length)
	if !ok {
		t.Fatalf("Memory.Read(%d, %d) failed", offset, length)
	}
	return bytes.Clone(b)
}

func readU32(t *testing.T, in runtime.Instance, offset uint32) uint32 {
	return binary.LittleEndian.Uint32(read(t, in, offset, 4))
}

func readU64(t *testing.T, in runtime.Instance, offset uint32) uint64 {
	return binary.LittleEndian.Uint64(read(t, in, offset, 8))
}

// wantFailure checks that err reports a failure other than an interrupt.
func wantFailure(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case errors.Is(err, runtime.ErrInterrupted):
		t.Errorf("%s: error %q matches ErrInterrupted", what, err)
	case err.Error() == "":
		t.Errorf("%s: empty error message", what)
	}
}
