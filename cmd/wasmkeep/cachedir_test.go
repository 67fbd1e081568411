package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The compile cache belongs to the machine (ADR 1058): a node on a fresh
// data directory starts from what another node of the machine compiled and
// pre-initialised, whether the cache is the user's ($XDG_CACHE_HOME),
// systemd's ($CACHE_DIRECTORY) or named by --cache-dir.
func TestFreshDataDirectoryStartsFromTheMachineCache(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	bin, guest := wasmkeepBinary(t), counter(t)
	xdg, elsewhere := t.TempDir(), t.TempDir()
	machine := filepath.Join(xdg, "wasmkeep")
	const fromCache = `msg="module pre-initialised at an earlier start"`
	start := func(env []string, args ...string) (string, *syncBuffer) {
		t.Helper()
		data := t.TempDir()
		_, cmd, logs := serveBinary(t, bin, append(withoutWasmkeepVars(), env...),
			append([]string{"--actor", "counter=" + guest, "--data-dir", data}, args...)...)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Process.Wait() })
		return data, logs
	}

	// The first start of the module on this machine compiles it and keeps
	// its snapshot in the user's cache, not in the data directory.
	data, logs := start([]string{"XDG_CACHE_HOME=" + xdg})
	waitFor(t, 2*time.Minute, "the first start's snapshot", func() bool {
		return strings.Contains(logs.String(), `msg="module pre-initialised"`)
	})
	if kept, _ := filepath.Glob(filepath.Join(machine, "preinit", "v1-*.wasm")); len(kept) != 1 {
		t.Errorf("snapshots in the machine's cache: %v, want one\n%s", kept, logs)
	}
	if _, err := os.Stat(filepath.Join(data, "cache")); err == nil {
		t.Error("the first start made a cache in its data directory")
	}
	// wazero's compiled code is filed under the build's wazero, this
	// repository's patched copy named by its digest (ADR 1065), so that
	// every build of it shares the code rather than each its own folder.
	if named, _ := filepath.Glob(filepath.Join(machine, "wazero-v*-????????????????")); len(named) != 1 {
		entries, _ := os.ReadDir(machine)
		t.Errorf("wazero's folders in the machine's cache: %v, want one named by its version and the copy's digest (the cache holds %v)", named, entries)
	}

	for _, c := range []struct {
		what string
		env  []string
		args []string
	}{
		{"$XDG_CACHE_HOME", []string{"XDG_CACHE_HOME=" + xdg}, nil},
		{"$CACHE_DIRECTORY", []string{"XDG_CACHE_HOME=" + elsewhere, "CACHE_DIRECTORY=" + machine}, nil},
		{"--cache-dir", []string{"XDG_CACHE_HOME=" + elsewhere}, []string{"--cache-dir", machine}},
	} {
		if _, logs := start(c.env, c.args...); !strings.Contains(logs.String(), fromCache) {
			t.Errorf("a fresh data directory with the cache from %s did not start from the kept snapshot:\n%s", c.what, logs)
		}
	}
}
