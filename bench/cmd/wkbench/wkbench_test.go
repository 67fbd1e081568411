//go:build linux

package main

import (
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickRun builds the server and the counter guest, runs the bench in
// -quick mode against them and checks that the CSV has every row with a
// positive value. It never judges the numbers themselves.
func TestQuickRun(t *testing.T) {
	bin, guest := benchtest.Build(t)
	out := filepath.Join(t.TempDir(), "results")
	path, err := run([]string{"-wasmkeep", bin, "-guest", guest, "-out", out, "-quick"}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	if servers := benchtest.CheckCSV(t, path, benchtest.Metrics); len(servers) != 1 {
		t.Errorf("%s has rows for %v, want one server", path, servers)
	}
}
