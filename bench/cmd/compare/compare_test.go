//go:build linux

package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
	"github.com/wasmkeep/wasmkeep/bench/measure"
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

// TestTargetsMemory checks that the memory target is judged on both
// readings, each labelled, so that a reader sees which one passes, and
// that each issue's targets come under its own heading.
func TestTargetsMemory(t *testing.T) {
	server := func(guest string, rss, pss float64) measure.Result {
		return measure.Result{Label: "wazero/c", Guest: guest, Rows: []measure.Row{
			{Metric: "memory_per_resident_actor", Value: rss, Unit: "KiB"},
			{Metric: "memory_per_resident_actor_pss", Value: pss, Unit: "KiB"},
		}}
	}
	var out bytes.Buffer
	printTargets(&out, server("js-counter", 1000, 1000), []measure.Result{server("c-counter", 1500, 500)})
	checkLines(t, out.String(), []string{
		"issue 6:",
		"wazero/c     memory_per_resident_actor       1.50x workerd (RSS, shared pages counted per actor), target <= 0.8x: missed",
		"wazero/c     memory_per_resident_actor_pss   0.50x workerd (PSS, shared pages divided), target <= 0.8x: met",
		"issue 16:",
		"wazero/c     memory_per_resident_actor       1.50x workerd (RSS, shared pages counted per actor), target <= 0.75x: missed",
		"wazero/c     memory_per_resident_actor_pss   0.50x workerd (PSS, shared pages divided), target <= 0.75x: met",
	})
}

// TestTargetsEveryGuest checks that a goal without a language judges every
// guest.
func TestTargetsEveryGuest(t *testing.T) {
	server := func(label, guest string, p99 float64) measure.Result {
		return measure.Result{Label: label, Guest: guest, Rows: []measure.Row{{Metric: "read_resident_p99", Value: p99, Unit: "us"}}}
	}
	var out bytes.Buffer
	printTargets(&out, server("workerd", "js-counter", 100), []measure.Result{
		server("wazero/c", "c-counter", 50), server("wazero/go", "go-counter", 120),
	})
	checkLines(t, out.String(), []string{
		"issue 16:",
		"wazero/c     read_resident_p99               0.50x workerd, target <= 0.7x: met",
		"wazero/go    read_resident_p99               1.20x workerd, target <= 0.7x: missed",
	})
}

// TestRegressions checks that each server is set against its before/ twin,
// with throughput judged the other way round.
func TestRegressions(t *testing.T) {
	server := func(label string, p50, tput float64) measure.Result {
		return measure.Result{Label: label, Rows: []measure.Row{
			{Metric: "read_resident_p50", Value: p50, Unit: "us"},
			{Metric: "throughput", Value: tput, Unit: "req/s"},
		}}
	}
	var out bytes.Buffer
	printRegressions(&out, []measure.Result{
		server("workerd", 100, 1000),
		server("wazero/c", 100, 800), server("before/wazero/c", 100, 1000),
		server("wazero/go", 150, 1000), server("before/wazero/go", 100, 1000),
	})
	checkLines(t, out.String(), []string{
		"wazero/c         read_resident_p50          1.00x before: no worse",
		"wazero/c         throughput                 0.80x before: worse",
		"wazero/go        read_resident_p50          1.50x before: worse",
		"wazero/go        throughput                 1.00x before: no worse",
	})
}

// checkLines compares printed lines with want, spaces at their ends aside.
func checkLines(t *testing.T, printed string, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSpace(printed), "\n")
	if len(got) != len(want) {
		t.Fatalf("printed:\n%s\nwant the lines\n%s", printed, strings.Join(want, "\n"))
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("line %q, want %q", strings.TrimSpace(got[i]), want[i])
		}
	}
}
