// Package runtime is the contract between the kernel and a WebAssembly
// engine (runtime/v2). The kernel owns the protocols (which hook runs when,
// the CPU budget, the wall clock, what host functions do); an engine owns the
// mechanisms: compiling and caching modules, instantiating them with WASI
// preview 1 and the kernel's host functions, calling exports, capping linear
// memory and stopping a guest when asked.
//
// Both engines (wazero, wasmtime) implement it; conformance/runtimetest holds
// the rules they must pass.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// API is the contract version a runtime plugin declares.
//
// runtime/v2 added InstanceConfig.Guest, which an engine must honour.
const API = "runtime/v2"

// Driver is what a runtime plugin's New returns.
type Driver interface {
	// NewEngine creates an engine. The kernel creates one per node.
	NewEngine(ctx context.Context, cfg Config) (Engine, error)
}

// Config is what the kernel asks of every engine.
type Config struct {
	// MemoryLimitPages caps every linear memory of every instance, in 64 KiB
	// pages, at most 65,535 (so that Memory.Size fits a uint32). memory.grow
	// past it fails (returns -1) in the guest; a module whose declared
	// minimum is above it fails to compile or instantiate.
	MemoryLimitPages uint32
	// CacheDir, when set, is a directory the engine may use to keep compiled
	// code across restarts. A corrupt or stale entry must be ignored.
	CacheDir string
	// HostModule is the import module name of HostFunctions ("wasmkeep").
	HostModule string
	// HostFunctions are the functions a guest may import from HostModule.
	HostFunctions []HostFunction
}

// Engine compiles modules. It is safe for concurrent use.
type Engine interface {
	// Compile validates and compiles a module. It does not check the
	// module's imports against what the host provides: the kernel does that,
	// from Module.Imports, so every engine refuses the same modules with the
	// same message. Compiling may ignore ctx (neither engine can stop it).
	Compile(ctx context.Context, wasm []byte) (Module, error)
	Close(ctx context.Context) error
}

// ValueType is a WebAssembly value type.
type ValueType byte

const (
	I32 ValueType = 0x7f
	I64 ValueType = 0x7e
	F32 ValueType = 0x7d
	F64 ValueType = 0x7c
)

func (t ValueType) String() string {
	switch t {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	}
	return "unknown"
}

// Signature is a function type.
type Signature struct {
	Params, Results []ValueType
}

// Import is one function a module imports.
type Import struct {
	Module, Name string
	Signature
	// IsFunc is false for imported memories, tables and globals, which no
	// host provides.
	IsFunc bool
}

// Export is one function a module exports.
type Export struct {
	Name string
	Signature
}

// Module is a compiled module. It is safe for concurrent use.
type Module interface {
	Imports() []Import
	// Exports lists the exported functions.
	Exports() []Export
	// ExportsMemory reports whether the module exports a memory by name.
	ExportsMemory(name string) bool
	// Instantiate creates an instance with WASI preview 1 (see the package
	// rules below) and the engine's host functions, then runs the module's
	// _initialize export if it has one, under the same rule as Function.Call:
	// once ctx is done it stops promptly with an error matching
	// ErrInterrupted. The guest's code (its start function and _initialize)
	// runs through cfg.Guest. Instances of one module share nothing but the
	// compiled code.
	Instantiate(ctx context.Context, cfg InstanceConfig) (Instance, error)
	// Close frees the module. Its instances run on until each is closed;
	// the closed module makes no more (Instantiate fails).
	Close(ctx context.Context) error
}

// Tier names the code a module's new instances run.
type Tier string

const (
	// TierFast is code an engine makes quickly and runs more slowly (an
	// interpreter, or a compiler that does not optimise).
	TierFast Tier = "fast"
	// TierOptimised is the engine's optimising compiler's code.
	TierOptimised Tier = "optimised"
)

// The values of an engine's tiering setting (ADR 1034), the same in every
// runtime plugin that compiles in tiers: on starts every module on the fast
// tier and compiles the optimised code in the background; auto does so
// where the engine's figures say it pays; off waits for the optimised code;
// fast never makes it (to compare or test the tiers).
const (
	TieringAuto = "auto"
	TieringOn   = "on"
	TieringOff  = "off"
	TieringFast = "fast"
)

// CheckTiering reports whether s is a tiering setting.
func CheckTiering(s string) error {
	switch s {
	case TieringAuto, TieringOn, TieringOff, TieringFast:
		return nil
	}
	return fmt.Errorf("tiering is %q, want %s, %s, %s or %s", s, TieringAuto, TieringOn, TieringOff, TieringFast)
}

// Tiered is implemented by a Module that an engine compiles in tiers: it
// runs on the fast tier at first while the optimised code is compiled in
// the background, and new instances get the optimised code once it is ready
// (instances already running keep theirs; the kernel replaces an actor's
// fast-tier instance between two events). A Module without it, or whose
// Tier is already TierOptimised, runs one kind of code throughout.
type Tiered interface {
	// Tier is the code an instance created now would run.
	Tier() Tier
	// Optimised is closed once Tier will not change again: when the
	// background compile ended, whether it succeeded (Tier is then
	// TierOptimised) or not (the fast tier stays, and the engine logs why),
	// and from the start for a module compiled in one tier only.
	Optimised() <-chan struct{}
}

// InstanceConfig configures one instance.
type InstanceConfig struct {
	// Stdout and Stderr receive what the guest writes to fds 1 and 2. Writes
	// must not block the guest for long; nil discards.
	Stdout, Stderr io.Writer
	// Guest, when set, runs the guest's own code that Instantiate runs: the
	// module's start function, if it has one, and _initialize. Instantiate
	// calls it with a function that runs that code under the ctx it is given
	// and fails with its error; the engine's own work (making the instance,
	// its memory and its error messages) runs outside it, under
	// Instantiate's ctx. So the kernel bounds the guest's code by its CPU
	// budget and never charges it the engine's work. An engine that cannot
	// run a start function apart from its own work runs both through Guest.
	// Nil runs the guest's code directly.
	Guest func(ctx context.Context, run func(ctx context.Context) error) error
}

// RunGuest runs the guest's code run through c.Guest, or directly if it is
// nil.
func (c InstanceConfig) RunGuest(ctx context.Context, run func(ctx context.Context) error) error {
	if c.Guest == nil {
		return run(ctx)
	}
	return c.Guest(ctx, run)
}

// Instance is one instantiated module. It is used by one goroutine at a
// time: the kernel never calls into an instance concurrently.
type Instance interface {
	// Function returns an exported function, or nil if there is none.
	Function(name string) Function
	// Memory is the instance's exported "memory", or nil for a module that
	// exports none (its host functions then get a Memory in which every
	// range is out of bounds).
	Memory() Memory
	// Close frees the instance; it is mandatory (nothing else frees an
	// instance's memory).
	Close(ctx context.Context) error
}

// Function is an exported function of an instance.
type Function interface {
	// Call calls the function. stack holds the parameters on entry and the
	// results on return, so len(stack) >= max(params, results).
	//
	// ctx is the context every host function called meanwhile receives.
	// Once ctx is done the engine stops the guest promptly (within
	// milliseconds, also inside a loop without calls) and Call returns an
	// error that matches ErrInterrupted. Any other failure (a trap, a host
	// function that panicked, proc_exit) returns an error that describes it.
	// After any error the kernel discards the instance.
	Call(ctx context.Context, stack []uint64) error
}

// Memory is an instance's linear memory, as host functions see it.
type Memory interface {
	// Read returns a view of memory (not a copy), valid until the guest runs
	// again; ok is false if the range is out of bounds.
	Read(offset, length uint32) (view []byte, ok bool)
	// Write copies data into memory; ok is false if out of bounds.
	Write(offset uint32, data []byte) (ok bool)
	// Size is the memory's size in bytes.
	Size() uint32
}

// HostFunction is a function the kernel provides to guests.
type HostFunction struct {
	Name string
	Signature
	// Func runs on the goroutine (and OS thread) of the Function.Call that
	// reached it, with that call's ctx. It must not call into or close the
	// instance that called it (engines refuse it with an error). It reads parameters from stack and
	// writes results to it, as Function.Call does. To fail the guest call it
	// panics with an error; the engine recovers it and Function.Call returns
	// an error wrapping it.
	Func func(ctx context.Context, mem Memory, stack []uint64)
}

// HostWork is the CPU accounting of the call a ctx belongs to: the
// kernel's guest budget counts the thread's CPU less what it spends between
// EnterHost and LeaveHost (host work, charged only to the event's cap).
// The kernel puts one in the ctx of every call (WithHostWork).
type HostWork interface {
	EnterHost() (since time.Duration)
	LeaveHost(since time.Duration)
}

type hostWorkKey struct{}

// WithHostWork returns ctx carrying w.
func WithHostWork(ctx context.Context, w HostWork) context.Context {
	return context.WithValue(ctx, hostWorkKey{}, w)
}

// AsHostWork runs f, work an engine does for a guest outside its code,
// as host work of the call ctx belongs to (if the kernel gave it any).
//
// Memory growth is such work (ADR 1043): when memory.grow succeeds, the
// engine writes each new page once with AsHostWork, before the guest runs
// again, so that the page faults of the new memory (a system call's worth
// of work each, and far more under some hypervisors) are host work. Without
// this a guest's budget would depend on the machine's cost of a page fault.
func AsHostWork(ctx context.Context, f func()) {
	if ctx != nil { // none outside a call
		if w, _ := ctx.Value(hostWorkKey{}).(HostWork); w != nil {
			defer w.LeaveHost(w.EnterHost())
		}
	}
	f()
}

// Waiter runs a guest's wait for the kernel: WASI's sleep (poll_oneoff on
// a clock) is a wait for time, not work, which the kernel runs outside the
// event's turn of the node's cores (ADR 1057). The kernel puts one in the
// ctx of every call (WithWaiter).
type Waiter interface {
	Wait(f func())
}

type waiterKey struct{}

// WithWaiter returns ctx carrying w.
func WithWaiter(ctx context.Context, w Waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

// AsWait runs f, a wait of the guest's (a sleep), through the Waiter of
// the call ctx belongs to, if the kernel gave it one. Every engine's sleep
// runs through it.
func AsWait(ctx context.Context, f func()) {
	if ctx != nil {
		if w, _ := ctx.Value(waiterKey{}).(Waiter); w != nil {
			w.Wait(f)
			return
		}
	}
	f()
}

// ErrInterrupted matches the error of a call stopped because its ctx was
// done. context.Cause(ctx) tells the kernel why.
var ErrInterrupted = errors.New("guest interrupted")

// Modules: WebAssembly 2.0 (no later proposals), at most 8 tables of at most
// 2^20 elements each, so both engines accept and refuse the same modules and
// a table cannot exhaust the host's memory.
//
// WASI preview 1, as every engine must provide it: WASI calls return an
// errno, never trap, whatever their arguments; what the guest writes to fds
// 1 and 2 goes to InstanceConfig's writers, every buffer of a write in one
// Write (no short writes); stdin is empty; clocks read
// the real time (realtime and monotonic); random_get reads a cryptographic
// source; args and environment are empty; no directory is preopened, so every
// path operation fails; sock_* calls fail (ENOTSUP or EBADF); poll_oneoff may
// sleep on clocks; proc_exit ends the call with an error.
