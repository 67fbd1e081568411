package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// A build holding a plugin built against another version of its contract
// (testdata/stalebuild: a bucket plugin on bucket/v0) does not start: every
// command exits with status 2 before doing anything, the message naming the
// plugin, both versions and what to do (issue 13, item 4; ADR 0002).
func TestBuildWithStalePluginIsRefused(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "wasmkeep-stale")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/stalebuild").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "wasmkeep: plugin bucket.stale implements bucket/v0, but this kernel requires " + bucket.API +
		": build with a version of the plugin brought up to " + bucket.API + ", or leave it out of the build (ADR 0002)\n"
	for _, args := range [][]string{
		// Without the refusal, serve would fail later (exit status 1) on
		// the missing guest rather than serve.
		{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--actor", "probe=" + filepath.Join(t.TempDir(), "probe.wasm")},
		{"plugins"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		if exitCode(err) != 2 || string(out) != want {
			t.Errorf("%s %s: %v\n%s\nwant exit status 2 and %q", bin, strings.Join(args, " "), err, out, want)
		}
	}
}
