//go:build linux && workerd

package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickWorkerd runs compare -quick on workerd (bench/workerd, installed
// by npm ci there) and on wazero with the Go counter. It needs npm and a
// 160 MB download, so it runs only with -tags workerd:
//
//	npm ci --ignore-scripts --prefix bench/workerd
//	go test -tags workerd ./bench/cmd/compare
//
// Besides the rows, the harness checks every answer of workerd's counter,
// and that a value written survives a workerd restart.
func TestQuickWorkerd(t *testing.T) {
	bin, guest := benchtest.Build(t)
	out := filepath.Join(t.TempDir(), "results")
	var stdout bytes.Buffer
	err := run([]string{"-quick", "-runs", "1", "-engines", "wazero", "-workerd", "../../workerd",
		"-wasmkeep", bin, "-guest", "go=" + guest, "-out", out}, &stdout)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, stdout.String(), out, 1, []string{"workerd/js-counter", "wazero/go-counter"})
	found := false
	for _, line := range strings.Split(stdout.String(), "\n") {
		f := strings.Fields(line)
		found = found || len(f) > 2 && f[0] == "wazero/go" && f[1] == "server_cpu_per_request"
	}
	if !found {
		t.Errorf("stdout has no target line for the Go counter's CPU per request")
	}
}
