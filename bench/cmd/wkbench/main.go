//go:build linux

// Command wkbench measures a single WasmKeep node serving the counter
// example: it starts `wasmkeep serve` as a child process, drives it over
// loopback HTTP/1.1 keep-alive, reads the server's memory and CPU time from
// /proc/<pid>, prints a table and writes one CSV row per metric to
// <out>/<date>-<commit>.csv. bench/README.md defines each row.
package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	path, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wkbench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", path)
}

type config struct {
	wasmkeep   string
	guest      string
	out        string
	engine     string
	guestLabel string
	quick      bool
	serveArgs  []string
}

// sizes are a run's counts: full for results, quick for tests.
type sizes struct {
	starts     int           // server starts per start-up row
	newActors  int           // first requests to new actors
	warmup     int           // requests to the resident actor before timing
	samples    int           // timed reads, and as many writes
	actors     int           // resident actors for memory and throughput
	clients    int           // concurrent clients for throughput
	loadWarmup time.Duration // of untimed load before the throughput run
	duration   time.Duration // of the throughput run
}

var (
	full  = sizes{starts: 3, newActors: 200, warmup: 200, samples: 2000, actors: 1000, clients: 8, loadWarmup: 3 * time.Second, duration: 10 * time.Second}
	quick = sizes{starts: 1, newActors: 20, warmup: 20, samples: 200, actors: 100, clients: 8, loadWarmup: time.Second, duration: 2 * time.Second}
)

func (s sizes) String() string {
	return fmt.Sprintf("%d starts, %d new actors, %d reads and writes, %d actors, %d clients for %v",
		s.starts, s.newActors, s.samples, s.actors, s.clients, s.duration)
}

// baseActors are awake when the memory baseline is read: memory per actor
// is (RSS with every actor awake - RSS with baseActors awake) / the rest.
const baseActors = 10

// maxInstances is far above the actors a run wakes (actors + newActors + a
// few), so the server never evicts one and the run never measures wakes.
const maxInstances = 4096

type metric struct {
	name  string
	value float64
	unit  string
}

// run parses args, measures and returns the path of the CSV it wrote.
func run(args []string, stdout io.Writer) (string, error) {
	var cfg config
	fs := flag.NewFlagSet("wkbench", flag.ContinueOnError)
	fs.StringVar(&cfg.wasmkeep, "wasmkeep", "", "the wasmkeep binary to measure (required)")
	fs.StringVar(&cfg.guest, "guest", "", "the counter guest, a .wasm file (required)")
	fs.StringVar(&cfg.out, "out", "bench/results", "directory for the CSV")
	fs.StringVar(&cfg.engine, "engine", "", "engine label for the CSV (default: the runtime the server logs at start)")
	fs.StringVar(&cfg.guestLabel, "guest-label", "go-counter", "guest label for the CSV")
	fs.BoolVar(&cfg.quick, "quick", false, "small counts, to check the harness rather than to measure")
	fs.Func("serve-arg", "extra argument for `wasmkeep serve`, such as --config=plugins.yaml (repeatable)", func(v string) error {
		cfg.serveArgs = append(cfg.serveArgs, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.wasmkeep == "" || cfg.guest == "" {
		return "", errors.New("-wasmkeep and -guest are required")
	}
	for _, p := range []*string{&cfg.wasmkeep, &cfg.guest} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", err
		}
		*p = abs
	}
	commit, err := checkoutCommit()
	if err != nil {
		return "", err
	}
	sz := full
	if cfg.quick {
		sz = quick
	}
	scratch, err := os.MkdirTemp("", "wkbench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	fsType := dataFS(scratch)
	fmt.Fprintf(stdout, "wkbench: %s at %s, guest %s; %v; data in %s (%s)\n",
		cfg.wasmkeep, commit, cfg.guest, sz, scratch, fsType)

	b := &bench{cfg: cfg, sz: sz, scratch: scratch, progress: stdout}
	metrics, engine, err := b.measure()
	if err != nil {
		return "", err
	}
	printTable(stdout, metrics)
	return writeCSV(cfg.out, commit, engine, cfg.guestLabel, fsType, metrics)
}

// checkoutCommit names the checkout wkbench runs in, which run.sh builds the
// server from: its short hash, with -dirty if anything differs from it,
// untracked files included.
func checkoutCommit() (string, error) {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --short HEAD (run wkbench inside the repository): %w", err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		return "", fmt.Errorf("git status: %w", err)
	}
	commit := strings.TrimSpace(string(rev))
	if len(bytes.TrimSpace(status)) > 0 {
		commit += "-dirty"
	}
	return commit, nil
}

func printTable(w io.Writer, metrics []metric) {
	for _, m := range metrics {
		fmt.Fprintf(w, "%-34s %10s %s\n", m.name, formatValue(m.value), m.unit)
	}
}

func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// writeCSV writes out/<date>-<commit>.csv, or -2, -3... if a run of the same
// build already wrote that file today.
func writeCSV(out, commit, engine, guest, fs string, metrics []metric) (string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	date := time.Now().UTC().Format(time.DateOnly)
	name := date + "-" + commit
	var f *os.File
	for i := 1; ; i++ {
		path := filepath.Join(out, name+".csv")
		if i > 1 {
			path = filepath.Join(out, name+"-"+strconv.Itoa(i)+".csv")
		}
		var err error
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		break
	}
	w := csv.NewWriter(f)
	w.Write([]string{"date", "commit", "engine", "guest", "metric", "value", "unit", "data_fs", "thp"})
	hp := thp()
	for _, m := range metrics {
		w.Write([]string{date, commit, engine, guest, m.name, formatValue(m.value), m.unit, fs, hp})
	}
	w.Flush()
	return f.Name(), errors.Join(w.Error(), f.Close())
}
