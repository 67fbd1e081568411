//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickRun runs wkbucket -quick -check on a node alone and on
// bucket-fs and checks the CSV: every durable-write and restore row with a
// positive value (never how large), and the durability check's verdicts:
// nothing lost on bucket-fs, everything lost by the control without a
// bucket.
func TestQuickRun(t *testing.T) {
	bin, guest := benchtest.Build(t)
	out := filepath.Join(t.TempDir(), "results")
	var stdout strings.Builder
	err := run([]string{"-wasmkeep", bin, "-guest", guest, "-out", out, "-quick", "-check", "-stores", "local,fs", "-restore-stores", "fs"}, &stdout)
	t.Log(stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(out, "*-bucket.csv"))
	if err != nil || len(files) != 1 {
		t.Fatalf("CSVs %v (%v), want one", files, err)
	}
	servers, all := benchtest.ReadCSV(t, files[0])
	if len(servers) != 1 {
		t.Fatalf("%s has rows for %v, want one server", files[0], servers)
	}
	values := all[servers[0]]
	for _, m := range []string{
		"durable_write_p50_local", "durable_write_p99_local", "durable_write_p50_fs", "durable_write_p99_fs",
		"durable_write_p50_ratio_fs_to_local", "restore_none_fs",
		"restore_written_10_fs", "restore_collected_100_fs", "objects_written_100_fs", "objects_collected_100_fs",
		"replayed_written_100_fs", "restore_collected_ratio_100_to_10_fs",
		"check_writes_before_kill_fs",
	} {
		if values[m] <= 0 {
			t.Errorf("%s = %v, want a positive value", m, values[m])
		}
	}
	// 100 writes: a periodic snapshot at 64 lets collection delete what
	// precedes it.
	if w, c := values["objects_written_100_fs"], values["objects_collected_100_fs"]; c >= w {
		t.Errorf("100 writes: %v objects after collection, %v as written; want fewer", c, w)
	}
	for m, want := range map[string]float64{
		"check_lost_after_stop_fs": 0, "check_lost_after_kill_fs": 0,
		"check_lost_after_stop_local": checkClients * checkActorsPerClient, "check_lost_after_kill_local": checkClients * checkActorsPerClient,
	} {
		if v, ok := values[m]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", m, v, ok, want)
		}
	}
}
