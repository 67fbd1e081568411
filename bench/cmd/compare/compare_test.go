//go:build linux

package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickGo runs compare -quick on wazero with the Go counter, without
// workerd (bench/workerd needs npm; see workerd_test.go): every answer is
// checked by the harness, the durable route must count like the plain one,
// and a value written must survive a restart. It checks that the run's CSV
// and the medians' have every row with a positive value, never how large.
func TestQuickGo(t *testing.T) {
	bin, guest := benchtest.Build(t)
	out := filepath.Join(t.TempDir(), "results")
	var stdout bytes.Buffer
	err := run([]string{"-quick", "-runs", "1", "-engines", "wazero",
		"-wasmkeep", bin, "-guest", "go=" + guest, "-out", out}, &stdout)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, stdout.String(), out, 1, []string{"wazero/go-counter"})
}

// checkFiles checks the files compare says it wrote: one per run and the
// medians, each with a row per metric for servers.
func checkFiles(t *testing.T, stdout, out string, runs int, servers []string) {
	t.Helper()
	var paths []string
	for _, line := range strings.Split(stdout, "\n") {
		if p, ok := strings.CutPrefix(line, "wrote "); ok {
			paths = append(paths, p)
		}
	}
	if len(paths) != runs+1 {
		t.Fatalf("wrote %v, want %d files (one per run and the medians)", paths, runs+1)
	}
	for i, p := range paths {
		suffix := "-workerd-median.csv"
		if i < runs {
			suffix = "-workerd-run" + string(rune('1'+i)) + ".csv"
		}
		if filepath.Dir(p) != out || !strings.HasSuffix(p, suffix) {
			t.Errorf("wrote %s, want %s/<date>-<commit>%s", p, out, suffix)
		}
		if got := benchtest.CheckCSV(t, p, benchtest.WithDurable); !slices.Equal(got, servers) {
			t.Errorf("%s has rows for %v, want %v", p, got, servers)
		}
	}
}
