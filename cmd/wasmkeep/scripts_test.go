package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's first command does its own set-up, as the second does: on
// a machine without the C toolchain, scripts/serve-examples installs it
// (scripts/install-c-toolchain, which scripts/test runs too) before it
// builds anything. Fake dpkg, apt-get, sudo and go record what the script
// runs; the fake go fails, which ends the script there.
func TestServeExamplesInstallsTheCToolchainFirst(t *testing.T) {
	fakes := t.TempDir()
	record := filepath.Join(fakes, "ran")
	for name, body := range map[string]string{
		"dpkg":    "exit 1", // nothing installed
		"apt-get": `echo "apt-get $*" >>"$RAN"`,
		"sudo":    `exec "$@"`,
		"go":      `echo "go $*" >>"$RAN"; exit 1`,
	} {
		if err := os.WriteFile(filepath.Join(fakes, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "serve-examples"))
	cmd.Env = append(os.Environ(), "PATH="+fakes+":"+os.Getenv("PATH"), "RAN="+record)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve-examples succeeded with a go that fails:\n%s", out)
	}
	ran, _ := os.ReadFile(record)
	lines := strings.Split(strings.TrimSpace(string(ran)), "\n")
	if len(lines) < 3 || lines[0] != "apt-get update -qq" ||
		lines[1] != "apt-get install -y -qq clang lld wasi-libc libclang-rt-14-dev-wasm32" || !strings.HasPrefix(lines[2], "go ") {
		t.Errorf("serve-examples ran, in order:\n%s\nwant apt-get update, apt-get install of the C toolchain, then go\n%s", ran, out)
	}
}
