package measure

import (
	"os/exec"
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
