package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A served process runs its C heap on huge pages (ADR 1067): where the
// kernel's huge pages are madvise-only, its heap is advised for them, and
// its log says so. Advised as it grows: 600 new C actors outgrow the first
// 32 MiB the heap was padded to (and advised at serve's start), and more
// is advised (fails with hugeheap.Advise taken out of the mattn binding).
// Not with --c-heap-huge-pages off nor with Wasmtime: chosen in the
// environment, the heap is never prepared; chosen where only serve reads
// it (a flag, a configuration file), the process runs itself again (the
// same PID) with the setting off in its environment, in place of any
// value it had there (an "on" kept first looped). Fails without
// hugeheap.Use in serve (checked by hand), or without the run again (one
// arena, not advised: the environment lacks the setting).
func TestServeHeapOnHugePages(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || !bytes.Contains(thp, []byte("[madvise]")) {
		t.Skipf("the kernel's transparent huge pages are not madvise-only (%q, %v): an advised heap shows nothing", thp, err)
	}
	env := slices.Clip(withoutWasmkeepVars()) // each case's append its own
	bin, guest := wasmkeepBinary(t), buildCGuest(t, "examples/c/counter")
	wasmtimeFile := filepath.Join(t.TempDir(), "plugins.yaml")
	if err := os.WriteFile(wasmtimeFile, []byte("runtime:\n  use: wasmtime\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const off, on = "WASMKEEP_NODE__C_HEAP_HUGE_PAGES=off", "WASMKEEP_NODE__C_HEAP_HUGE_PAGES=on"
	for _, c := range []struct {
		name    string
		env     []string
		args    []string
		actors  int
		advised int64 // bytes of the heap advised at least (0: none)
		again   bool  // run again with off in its environment
	}{
		{"by default", env, nil, 600, 40 << 20, false},
		{"with --c-heap-huge-pages off", env, []string{"--c-heap-huge-pages", "off"}, 20, 0, true},
		{"with the variable on and --c-heap-huge-pages off", append(env, on), []string{"--c-heap-huge-pages", "off"}, 20, 0, true},
		{"with Wasmtime in the environment", append(env, "WASMKEEP_RUNTIME__USE=wasmtime"), nil, 20, 0, false},
		{"with Wasmtime in a configuration file", env, []string{"--config", wasmtimeFile}, 20, 0, true},
	} {
		url, cmd, logs := serveBinary(t, bin, c.env, append([]string{"--actor", "counter=" + guest, "--data-dir", t.TempDir()}, c.args...)...)
		for i := range c.actors { // new connections: the heap grows, and is advised
			if r := ask(t, "POST", fmt.Sprintf("%s/actor/counter/h%d", url, i)); r.code != 200 {
				t.Fatalf("%s: counter/h%d: %+v\n%s", c.name, i, r, logs)
			}
		}
		pid := cmd.Process.Pid
		if advised := heapAdvised(t, pid); c.advised == 0 && advised != 0 || advised < c.advised {
			t.Errorf("%s: %d MiB of the heap advised for huge pages, want %d at least (0: none)", c.name, advised>>20, c.advised>>20)
		}
		if said := fmt.Sprintf("c_heap_huge_pages=%v", c.advised > 0); !strings.Contains(logs.String(), said) {
			t.Errorf("%s: the serving line does not say %s:\n%s", c.name, said, logs)
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		vars := strings.Split(string(environ), "\x00")
		if again := slices.Contains(vars, off) && !slices.Contains(vars, on); again != c.again {
			t.Errorf("%s: the serving process (pid %d) has %s alone in its environment: %v, want %v", c.name, pid, off, again, c.again)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// heapAdvised is how many bytes of process pid's [heap] mappings are
// advised for huge pages (VmFlags hg).
func heapAdvised(t *testing.T, pid int) int64 {
	t.Helper()
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var advised, size int64
	for line := range strings.SplitSeq(string(smaps), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			size = 0
			if f[len(f)-1] == "[heap]" {
				var lo, hi int64
				fmt.Sscanf(f[0], "%x-%x", &lo, &hi)
				size = hi - lo
			}
		case len(f) > 0 && f[0] == "VmFlags:" && slices.Contains(f[1:], "hg"):
			advised += size
		}
	}
	return advised
}
