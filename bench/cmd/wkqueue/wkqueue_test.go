//go:build linux

package main

import (
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickRun runs wkqueue -quick on one engine and checks that the CSV
// has every row with a positive value. It never judges the numbers.
func TestQuickRun(t *testing.T) {
	bin, _ := benchtest.Build(t)
	queue := benchtest.BuildGuest(t, "examples/jobs/queue")
	client := benchtest.BuildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient")
	out := filepath.Join(t.TempDir(), "results")
	path, err := run([]string{"-wasmkeep", bin, "-queue", queue, "-client", client, "-engines", "wazero", "-out", out, "-quick"}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var metrics []string
	for _, p := range phases {
		metrics = append(metrics, "queue_"+p.name+"_p50", "queue_"+p.name+"_p99", "queue_"+p.name+"_messages_per_s")
	}
	if servers := benchtest.CheckCSV(t, path, metrics); len(servers) != 1 {
		t.Errorf("%s has rows for %v, want one server", path, servers)
	}
}
