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
// kernel's huge pages are madvise-only, its heap is advised for them once
// new actors opened their databases, and its log says so. Not with
// --c-heap-huge-pages off nor with Wasmtime: chosen in the environment,
// the heap is never prepared; chosen where only serve reads it (a flag, a
// configuration file), the process runs itself again (the same PID) with
// the setting off in its environment. Fails without hugeheap.Use in serve
// (checked by hand), or without the run again (one arena, not advised:
// the environment lacks the setting).
func TestServeHeapOnHugePages(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || !bytes.Contains(thp, []byte("[madvise]")) {
		t.Skipf("the kernel's transparent huge pages are not madvise-only (%q, %v): an advised heap shows nothing", thp, err)
	}
	env := withoutWasmkeepVars()
	bin, guest := wasmkeepBinary(t), counter(t)
	wasmtimeFile := filepath.Join(t.TempDir(), "plugins.yaml")
	if err := os.WriteFile(wasmtimeFile, []byte("runtime:\n  use: wasmtime\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const off = "WASMKEEP_NODE__C_HEAP_HUGE_PAGES=off"
	for _, c := range []struct {
		name    string
		env     []string
		args    []string
		advised bool
		again   bool // run again with off in its environment
	}{
		{"by default", env, nil, true, false},
		{"with --c-heap-huge-pages off", env, []string{"--c-heap-huge-pages", "off"}, false, true},
		{"with Wasmtime in the environment", append(env, "WASMKEEP_RUNTIME__USE=wasmtime"), nil, false, false},
		{"with Wasmtime in a configuration file", env, []string{"--config", wasmtimeFile}, false, true},
	} {
		url, cmd, logs := serveBinary(t, bin, c.env, append([]string{"--actor", "counter=" + guest, "--data-dir", t.TempDir()}, c.args...)...)
		for i := range 20 { // new connections: the heap grows, and is advised
			if r := ask(t, "POST", fmt.Sprintf("%s/actor/counter/h%d", url, i)); r.code != 200 {
				t.Fatalf("%s: counter/h%d: %+v\n%s", c.name, i, r, logs)
			}
		}
		pid := cmd.Process.Pid
		if advised := heapAdvised(t, pid); advised != c.advised {
			t.Errorf("%s: the heap advised for huge pages: %v, want %v", c.name, advised, c.advised)
		}
		if said := fmt.Sprintf("c_heap_huge_pages=%v", c.advised); !strings.Contains(logs.String(), said) {
			t.Errorf("%s: the serving line does not say %s:\n%s", c.name, said, logs)
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if again := slices.Contains(strings.Split(string(environ), "\x00"), off); again != c.again {
			t.Errorf("%s: the serving process (pid %d) has %s in its environment: %v, want %v", c.name, pid, off, again, c.again)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// heapAdvised reports whether a [heap] mapping of process pid is advised
// for huge pages (VmFlags hg).
func heapAdvised(t *testing.T, pid int) bool {
	t.Helper()
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	inHeap := false
	for line := range strings.SplitSeq(string(smaps), "\n") {
		switch f := strings.Fields(line); {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			inHeap = f[len(f)-1] == "[heap]"
		case inHeap && len(f) > 0 && f[0] == "VmFlags:":
			if strings.Contains(line, " hg") {
				return true
			}
		}
	}
	return false
}
