//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// wkmem wakes real counter actors on wazero and finds their linear
// memories, the guest's data in them and the report's rows.
func TestWakeAndSplit(t *testing.T) {
	guest := filepath.Join(t.TempDir(), "counter.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", guest, "github.com/wasmkeep/wasmkeep/examples/counter")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the counter: %v\n%s", err, out)
	}
	r, err := measure(options{guest: guest, engine: "wazero", actors: 3, pageMap: true})
	if err != nil {
		t.Fatal(err)
	}
	l := r.layout
	if l.data == 0 || l.dataEnd < l.data || l.initial < l.dataEnd {
		t.Errorf("layout %+v: want data segments that end within the initial memory", l)
	}
	if r.linear.instances != 3 || r.linear.size < 3*l.initial {
		t.Errorf("%d instances with %d bytes of memory, want 3 of at least %d", r.linear.instances, r.linear.size, l.initial)
	}
	if touched := r.linear.private[0] + r.linear.shared[0]; touched == 0 {
		t.Error("no page of the data segments is present")
	}
	if n := int64(len(r.linear.pageMap)); n < l.initial/int64(os.Getpagesize()) {
		t.Errorf("page map of %d pages for an initial memory of %d bytes", n, l.initial)
	}
	var out strings.Builder
	r.print(&out)
	for _, row := range []string{"RSS (what wasmkeep bench reads)", "PSS", "linear memory present", "data segments", "host Go heap", "rest"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
}
