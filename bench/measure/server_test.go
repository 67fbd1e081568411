package measure

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAlone checks that a server with a child process is refused, as its
// rows would read one process of two, and that one without is not.
func TestAlone(t *testing.T) {
	start := func(script string) *server {
		cmd := exec.Command("/bin/sh", "-c", script)
		// A group of its own, so that cleanup ends the child too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return &server{Spawned: &Spawned{Cmd: cmd}}
	}
	// exec: the shell becomes sleep, no child.
	if err := start("exec sleep 30").alone(); err != nil {
		t.Errorf("a server without children: %v", err)
	}
	parent := start("sleep 30 & wait")
	// The shell forks its child right after starting; wait for it.
	var err error
	for range 1000 {
		if err = parent.alone(); err != nil {
			break
		}
		exec.Command("sleep", "0.005").Run()
	}
	if err == nil || !strings.Contains(err.Error(), "child processes") {
		t.Errorf("a server with a child: %v, want an error naming its child processes", err)
	}
}

// A server whose guest asks to be pre-initialised is measured only once
// its log says how that went; a guest that does not ask, at once.
func TestPreinitialisedWaitsForTheLogOfAGuestThatAsks(t *testing.T) {
	dir := t.TempDir()
	// The smallest module exporting preinit.Marker: a function () -> ().
	asks := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 4, 1, 0x60, 0, 0, // type section
		3, 2, 1, 0, // function section
		7, 20, 1, 16, 'w', 'a', 's', 'm', 'k', 'e', 'e', 'p', '_', 'p', 'r', 'e', 'i', 'n', 'i', 't', 0, 0, // export
		10, 4, 1, 2, 0, 0x0b, // code
	}
	plain := asks[:8]
	for name, wasm := range map[string][]byte{"asks.wasm": asks, "plain.wasm": plain} {
		if err := os.WriteFile(filepath.Join(dir, name), wasm, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "log")
	os.WriteFile(log, []byte(`level=INFO msg="class loaded"`+"\n"), 0o600)
	w := Wasmkeep{Guest: filepath.Join(dir, "asks.wasm")}
	if w.Preinitialised(log) {
		t.Error("ready before the log said the module was pre-initialised")
	}
	for _, line := range []string{`msg="module pre-initialised at an earlier start"`, `msg="module not pre-initialised" why=x`} {
		os.WriteFile(log, []byte(line+"\n"), 0o600)
		if !w.Preinitialised(log) {
			t.Errorf("not ready after %s", line)
		}
	}
	os.WriteFile(log, nil, 0o600)
	if w := (Wasmkeep{Guest: filepath.Join(dir, "plain.wasm")}); !w.Preinitialised(log) {
		t.Error("a guest that does not ask waits for a snapshot")
	}
}
