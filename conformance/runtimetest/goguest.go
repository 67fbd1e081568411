package runtimetest

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

//go:embed testdata/goguest/main.go
var goGuestSource []byte

// goGuestWasm builds testdata/goguest once per test binary with the local Go
// toolchain; Go's build cache makes later runs quick.
var goGuestWasm = sync.OnceValues(func() ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "runtimetest-goguest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for name, b := range map[string][]byte{"go.mod": []byte("module goguest\n\ngo 1.24\n"), "main.go": goGuestSource} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", "guest.wasm", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off",
		"GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the Go guest: %v\n%s", err, out)
	}
	return os.ReadFile(filepath.Join(dir, "guest.wasm"))
})

// goGuest returns the Go guest and the engine configuration it needs (its
// host function, and memory: the Go runtime needs 2 MiB to start; 128 MiB is
// WasmKeep's default), or skips the test where it cannot be built.
func goGuest(t *testing.T) ([]byte, runtime.Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("building and compiling a Go guest takes a while (a minute under -race with a Go compiler)")
	}
	wasm, err := goGuestWasm()
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("no Go toolchain to build the guest:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	fns := []runtime.HostFunction{{Name: "upper", Signature: sig("iiii>i"), Func: upper}}
	return wasm, runtime.Config{MemoryLimitPages: 2048, HostModule: hostModule, HostFunctions: fns}
}

// A reactor built by the Go toolchain runs: Instantiate runs _initialize
// (without it the Go runtime traps), and an export prints to stdout and
// stderr, sleeps and calls the host.
func testGoReactor(t *testing.T, h *harness) {
	wasm, cfg := goGuest(t)
	mod := compile(t, h.engine(t, cfg), wasm)
	if !slices.ContainsFunc(mod.Imports(), func(i runtime.Import) bool {
		return i.Module == hostModule && i.Name == "upper" && i.IsFunc && fmt.Sprint(i.Signature) == fmt.Sprint(sig("iiii>i"))
	}) {
		t.Errorf("Imports() = %v, want wasmkeep.upper(i32, i32, i32, i32) -> i32 among them", mod.Imports())
	}
	if !mod.ExportsMemory("memory") {
		t.Error(`ExportsMemory("memory") = false`)
	}

	var stdout, stderr bytes.Buffer
	in := instantiate(t, mod, runtime.InstanceConfig{Stdout: &stdout, Stderr: &stderr})
	const greeting = "hello from go"
	if n := int32(call(t, in, "run", 10)[0]); n != int32(len(greeting)) {
		t.Errorf("run(10) = %d, want %d", n, len(greeting))
	}
	if want := greeting + "\nHELLO FROM GO\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if stderr.String() != "to stderr\n" {
		t.Errorf("stderr %q, want %q", stderr.String(), "to stderr\n")
	}
}
