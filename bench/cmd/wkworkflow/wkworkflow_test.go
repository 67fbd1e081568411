//go:build linux

package main

import (
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickRun runs the bench in -quick mode on the configured engine and
// checks that the CSV has every row; it never judges the numbers.
func TestQuickRun(t *testing.T) {
	bin, _ := benchtest.Build(t)
	guest := benchtest.BuildGuest(t, "bench/cmd/wkworkflow/guest")
	out := filepath.Join(t.TempDir(), "results")
	path, err := run([]string{"-wasmkeep", bin, "-guest", guest, "-out", out, "-quick", "-engines", "wazero"}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	_, values := benchtest.ReadCSV(t, path)
	for _, metric := range []string{"workflow_run_p50_n0", "workflow_run_p99_n10", "workflow_replay_over_floor_n10"} {
		if _, ok := values["wazero/go-workflow"][metric]; !ok {
			t.Errorf("%s has no %s: %v", path, metric, values)
		}
	}
}
