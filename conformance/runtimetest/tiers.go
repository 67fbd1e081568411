package runtimetest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// An engine that compiles in tiers (runtime.Tiered) switches a module to its
// optimised code for new instances only: an instance made before the switch
// keeps running, and both behave the same. A second engine on the same
// CacheDir starts the module optimised. An engine without tiers passes
// trivially. The guest is the Go reactor, large enough that its optimised
// compile outlasts the first instantiation.
func testTierSwitch(t *testing.T, h *harness) {
	wasm, cfg := goGuest(t)
	cfg.CacheDir = t.TempDir()
	mod := compile(t, h.engine(t, cfg), wasm)
	tiered, ok := mod.(runtime.Tiered)
	if !ok {
		t.Skip("the engine does not compile in tiers")
	}
	select {
	case <-tiered.Optimised():
		if got := tiered.Tier(); got != runtime.TierOptimised && got != runtime.TierFast {
			t.Errorf("Tier() = %q", got)
		}
		t.Skipf("the engine compiles in one tier (%s)", tiered.Tier())
	default:
	}
	if got := tiered.Tier(); got != runtime.TierFast {
		t.Fatalf("while the background compile runs, Tier() = %q, want %q", got, runtime.TierFast)
	}
	var before, after bytes.Buffer
	first := instantiate(t, mod, runtime.InstanceConfig{Stdout: &before})
	if tiered.Tier() != runtime.TierFast {
		t.Skip("the optimised code was ready before the first instance was made: nothing to compare")
	}
	select {
	case <-tiered.Optimised():
		t.Skip("the optimised code was ready before the first instance ran: nothing to compare")
	default:
	}
	const greeting = "hello from go"
	if n := int32(call(t, first, "run", 0)[0]); n != int32(len(greeting)) {
		t.Errorf("fast tier: run(0) = %d, want %d", n, len(greeting))
	}
	<-tiered.Optimised()
	if got := tiered.Tier(); got != runtime.TierOptimised {
		t.Fatalf("after the background compile, Tier() = %q, want %q", got, runtime.TierOptimised)
	}
	second := instantiate(t, mod, runtime.InstanceConfig{Stdout: &after})
	if n := int32(call(t, second, "run", 0)[0]); n != int32(len(greeting)) {
		t.Errorf("optimised tier: run(0) = %d, want %d", n, len(greeting))
	}
	// The instance made before the switch still runs, its code unchanged.
	if n := int32(call(t, first, "run", 0)[0]); n != int32(len(greeting)) {
		t.Errorf("fast tier after the switch: run(0) = %d, want %d", n, len(greeting))
	}
	if want := greeting + "\nHELLO FROM GO\n"; before.String() != want+want || after.String() != want {
		t.Errorf("stdout: first instance %q, second %q; want %q twice and once", before.String(), after.String(), want)
	}

	// The optimised code is in the cache now: another engine starts with it.
	again := compile(t, h.engine(t, cfg), wasm).(runtime.Tiered)
	if got := again.Tier(); got != runtime.TierOptimised {
		t.Errorf("with the optimised code in the cache, Tier() = %q, want %q", got, runtime.TierOptimised)
	}
	select {
	case <-again.Optimised():
	default:
		t.Error("with the optimised code in the cache, Optimised() is not closed")
	}
}

// A module closed while its optimised code compiles in the background (a
// server stopped soon after it started) still leaves that code in the
// cache once the engine is closed: the next engine starts optimised.
func testTierCacheAfterClose(t *testing.T, h *harness) {
	wasm, cfg := goGuest(t)
	cfg.CacheDir = t.TempDir()
	e, err := h.newDriver(t).NewEngine(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	tiered, ok := mod.(runtime.Tiered)
	if ok {
		select {
		case <-tiered.Optimised():
			ok = false // one tier only
		default:
		}
	}
	if !ok {
		mod.Close(t.Context())
		e.Close(t.Context())
		t.Skip("the engine does not compile in the background")
	}
	if err := mod.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	again := compile(t, h.engine(t, cfg), wasm).(runtime.Tiered)
	if got := again.Tier(); got != runtime.TierOptimised {
		t.Errorf("after an engine closed with the module's background compile running, the next starts at %q, want %q", got, runtime.TierOptimised)
	}
}

// BackgroundCompileFails checks what an engine does when its background
// compiles fail, which only the engine's own tests can arrange: e compiles
// in tiers, every background compile of it fails with an error whose
// message is reason, and the engine logs through slog's default logger,
// which the caller pointed at a text handler writing to logs. A module
// still starts, on the fast tier, where it stays and runs, and the failure
// is logged at WARN with the error.
func BackgroundCompileFails(t *testing.T, e runtime.Engine, reason string, logs fmt.Stringer) {
	t.Helper()
	m := compile(t, e, addGuest())
	tiered, ok := m.(runtime.Tiered)
	if !ok {
		t.Fatal("the module does not implement runtime.Tiered")
	}
	<-tiered.Optimised()
	if got := tiered.Tier(); got != runtime.TierFast {
		t.Errorf("after a failed background compile, Tier() = %q, want %q", got, runtime.TierFast)
	}
	if got := call(t, instantiate(t, m, runtime.InstanceConfig{}), "add32", 2, 3)[0]; got != 5 {
		t.Errorf("add32(2, 3) = %d on the fast tier", got)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, reason) {
		t.Errorf("log %q, want a warning with %q", out, reason)
	}
}
