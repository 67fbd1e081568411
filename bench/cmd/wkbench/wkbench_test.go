//go:build linux

package main

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestQuickRun builds the server and the counter guest, runs the bench in
// -quick mode against them and checks that the CSV has every row with a
// positive value. It never judges the numbers themselves.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "wasmkeep")
	guest := filepath.Join(dir, "counter.wasm")
	goBuild(t, nil, "-o", bin, "github.com/wasmkeep/wasmkeep/cmd/wasmkeep")
	goBuild(t, []string{"GOOS=wasip1", "GOARCH=wasm"}, "-buildmode=c-shared", "-o", guest, "github.com/wasmkeep/wasmkeep/examples/counter")

	out := filepath.Join(dir, "results")
	path, err := run([]string{"-wasmkeep", bin, "-guest", guest, "-out", out, "-quick"}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	header := []string{"date", "commit", "engine", "guest", "metric", "value", "unit", "data_fs", "thp"}
	if len(records) == 0 || !slices.Equal(records[0], header) {
		t.Fatalf("CSV starts with %v, want the header %v", records[:min(len(records), 1)], header)
	}
	values := map[string]float64{}
	for _, r := range records[1:] {
		if r[1] == "" || r[2] == "" || r[6] == "" {
			t.Errorf("row %v lacks a commit, engine or unit", r)
		}
		v, err := strconv.ParseFloat(r[5], 64)
		if err != nil {
			t.Errorf("metric %s: value %q: %v", r[4], r[5], err)
		}
		values[r[4]] = v
	}
	for _, m := range []string{
		"startup_to_first_response", "startup_to_first_response_restart",
		"first_request_new_actor_p50",
		"read_resident_p50", "read_resident_p99", "write_resident_p50", "write_resident_p99",
		"memory_per_resident_actor", "server_rss_resident_actors", "resident_actors",
		"throughput", "server_cpu_per_request", "throughput_clients",
	} {
		v, ok := values[m]
		switch {
		case !ok:
			t.Errorf("metric %s missing from %s", m, path)
		case v <= 0:
			t.Errorf("metric %s = %v, want a positive value", m, v)
		}
	}
	if len(values) != len(records)-1 {
		t.Errorf("%s repeats a metric", path)
	}
}

func goBuild(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
}
