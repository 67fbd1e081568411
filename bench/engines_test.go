//go:build linux

package bench_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestEnginesQuick runs `wasmkeep bench --quick` end to end on wazero and,
// in a cgo build, wasmtime, and checks that the table and the CSV have every
// row for each engine with a positive value. It never judges the numbers.
func TestEnginesQuick(t *testing.T) {
	bin, guest := benchtest.Build(t)
	engines := []string{"wazero"}
	// benchtest.Build's go build runs in this environment, so it has cgo,
	// and with it wasmtime, exactly when go env says so.
	if cgo, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil {
		t.Fatal(err)
	} else if strings.TrimSpace(string(cgo)) == "1" {
		engines = append(engines, "wasmtime")
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	cmd := exec.Command(bin, "bench", "--quick", "--engines", strings.Join(engines, ","),
		"--actor", "counter="+guest, "--out", out)
	cmd.Stdout, cmd.Stderr = &stdout, t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("wasmkeep bench: %v\n%s", err, stdout.String())
	}
	t.Logf("stdout:\n%s", stdout.String())

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	columns := append([]string{"metric", "unit"}, engines...)
	for _, e := range engines[1:] {
		columns = append(columns, e+"/"+engines[0])
	}
	if len(lines) == 0 || !slices.Equal(strings.Fields(lines[0]), columns) {
		t.Fatalf("table heading %q, want the columns %v", lines[0], columns)
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) == len(columns) {
			rows[f[0]] = f[2:]
		}
	}
	for _, m := range benchtest.Metrics {
		cells, ok := rows[m]
		if !ok {
			t.Errorf("table has no row %s", m)
			continue
		}
		for i, cell := range cells {
			if v, err := strconv.ParseFloat(cell, 64); err != nil || v <= 0 {
				t.Errorf("row %s, column %s: %q, want a positive number", m, columns[i+2], cell)
			}
		}
	}

	path := strings.TrimPrefix(lines[len(lines)-1], "wrote ")
	if filepath.Dir(path) != out || !strings.Contains(filepath.Base(path), "-engines-"+strings.Join(engines, "-")) {
		t.Errorf("last line %q, want wrote %s/<date>-<commit>-engines-%s.csv", lines[len(lines)-1], out, strings.Join(engines, "-"))
	}
	var want []string
	for _, e := range engines {
		want = append(want, e+"/counter")
	}
	if got := benchtest.CheckCSV(t, path, benchtest.Metrics); !slices.Equal(got, want) {
		t.Errorf("%s has rows for %v, want %v", path, got, want)
	}
}
