//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// counterGuest builds examples/counter once per test binary.
var counterGuest = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "wkmem-test-")
	if err != nil {
		return "", err
	}
	guest := filepath.Join(dir, "counter.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", guest, "github.com/wasmkeep/wasmkeep/examples/counter")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the counter: %w\n%s", err, out)
	}
	return guest, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if guest, err := counterGuest(); err == nil {
		os.RemoveAll(filepath.Dir(guest))
	}
	os.Exit(code)
}

// wkmem wakes real counter actors on wazero and finds their linear
// memories, the guest's data in them and the report's rows.
func TestWakeAndSplit(t *testing.T) {
	guest, err := counterGuest()
	if err != nil {
		t.Fatal(err)
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

// The Go SDK's garbage collector target keeps a busy actor's memory small:
// after 3,000 requests the counter has 4.3 MiB of linear memory; at Go's
// default target (GOGC=100) it has 7.3 MiB.
func TestSDKKeepsTheHeapSmall(t *testing.T) {
	guest, err := counterGuest()
	if err != nil {
		t.Fatal(err)
	}
	r, err := measure(options{guest: guest, engine: "wazero", actors: 1, posts: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if r.linear.instances != 1 || r.linear.size > 5<<20 {
		t.Errorf("%d instances, %d KiB of linear memory after 3,000 requests; want 1, at most 5 MiB",
			r.linear.instances, r.linear.size>>10)
	}
}
