// Package benchtest builds what the bench tests measure.
package benchtest

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// Build builds the standard wasmkeep binary and the counter guest from this
// module into a temporary directory and returns their paths.
func Build(t testing.TB) (wasmkeep, guest string) {
	t.Helper()
	dir := t.TempDir()
	wasmkeep = filepath.Join(dir, "wasmkeep")
	guest = filepath.Join(dir, "counter.wasm")
	goBuild(t, nil, "-o", wasmkeep, "github.com/wasmkeep/wasmkeep/cmd/wasmkeep")
	goBuild(t, []string{"GOOS=wasip1", "GOARCH=wasm"}, "-buildmode=c-shared", "-o", guest, "github.com/wasmkeep/wasmkeep/examples/counter")
	return wasmkeep, guest
}

func goBuild(t testing.TB, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
}

// Metrics are the rows every run measures, in order.
var Metrics = []string{
	"startup_to_first_response", "startup_to_first_response_restart",
	"first_request_new_actor_p50",
	"read_resident_p50", "read_resident_p99", "write_resident_p50", "write_resident_p99",
	"memory_per_resident_actor", "server_rss_resident_actors", "resident_actors",
	"throughput", "server_cpu_per_request", "throughput_clients",
}

// CheckCSV checks a CSV that measure.WriteCSV wrote: its header, and each
// engine's rows, every metric once with a positive value. It returns the
// engines in the order the file lists them. It never judges the numbers
// themselves.
func CheckCSV(t testing.TB, path string) (engines []string) {
	t.Helper()
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
		t.Fatalf("%s starts with %v, want the header %v", path, records[:min(len(records), 1)], header)
	}
	values := map[string]map[string]float64{} // engine, metric
	for _, r := range records[1:] {
		if r[1] == "" || r[2] == "" || r[6] == "" {
			t.Errorf("row %v lacks a commit, engine or unit", r)
		}
		v, err := strconv.ParseFloat(r[5], 64)
		if err != nil {
			t.Errorf("metric %s: value %q: %v", r[4], r[5], err)
		}
		if values[r[2]] == nil {
			values[r[2]] = map[string]float64{}
			engines = append(engines, r[2])
		}
		if _, dup := values[r[2]][r[4]]; dup {
			t.Errorf("%s repeats metric %s for engine %s", path, r[4], r[2])
		}
		values[r[2]][r[4]] = v
	}
	for _, e := range engines {
		for _, m := range Metrics {
			v, ok := values[e][m]
			switch {
			case !ok:
				t.Errorf("engine %s: metric %s missing from %s", e, m, path)
			case v <= 0:
				t.Errorf("engine %s: metric %s = %v, want a positive value", e, m, v)
			}
		}
		if len(values[e]) != len(Metrics) {
			t.Errorf("engine %s: %d metrics in %s, want %d", e, len(values[e]), path, len(Metrics))
		}
	}
	return engines
}
