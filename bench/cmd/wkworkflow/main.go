//go:build linux

// wkworkflow measures what replay costs a workflow (sdk/go/workflow, ADR
// 1038): one run of an instance with n recorded steps, parked on a sleep,
// for n = 0, 100, 1000 and 5000, on each engine. A run loads the steps,
// replays them, finds the park, sets the alarm and records the wait
// (exec-durable); it is made inside a request to the instance
// (bench/cmd/wkworkflow/guest), so n = 0 is the floor: HTTP, the event, the
// runner's reads and its durable write. The steps are recorded first on a
// server with a large CPU budget; the runs are timed on a server with the
// default one, on the same data. It prints a table and writes
// <out>/<date>-<commit>-workflow.csv.
//
//	wkworkflow -wasmkeep BIN -guest wkworkflow.wasm [-engines wazero,wasmtime] [-runs 30] [-quick]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	path, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		log.Fatal("wkworkflow: ", err)
	}
	fmt.Println("wrote", path)
}

func run(args []string, stdout io.Writer) (string, error) {
	fs := flag.NewFlagSet("wkworkflow", flag.ContinueOnError)
	bin := fs.String("wasmkeep", "", "the server binary (required)")
	guest := fs.String("guest", "", "bench/cmd/wkworkflow/guest built for wasip1 (required)")
	engines := fs.String("engines", "wazero,wasmtime", "runtime plugins (WASMKEEP_RUNTIME__USE), comma-separated")
	runs := fs.Int("runs", 30, "timed runs per size")
	quick := fs.Bool("quick", false, "small sizes and counts, to check the harness rather than to measure")
	out := fs.String("out", "bench/results", "directory for the CSV")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *bin == "" || *guest == "" {
		return "", errors.New("-wasmkeep and -guest are required (bench/README.md, wkworkflow)")
	}
	sizes := []int{0, 100, 1000, 5000}
	if *quick {
		sizes, *runs = []int{0, 10}, 3
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "wkworkflow: %s at %s; %d runs per size\n", *bin, commit, *runs)
	var results []measure.Result
	for _, engine := range strings.Split(*engines, ",") {
		res, err := measureEngine(measure.Wasmkeep{Binary: *bin, Class: "wf", Guest: *guest, Env: []string{"WASMKEEP_RUNTIME__USE=" + engine}}, sizes, *runs, stdout)
		if err != nil {
			return "", fmt.Errorf("%s: %w", engine, err)
		}
		results = append(results, res)
	}
	measure.PrintTable(stdout, results...)
	return measure.WriteCSV(*out, commit, "-workflow", results...)
}

// measureEngine records the instances on one server, then times their
// runs on another with the default CPU budget.
func measureEngine(srv measure.Wasmkeep, sizes []int, runs int, stdout io.Writer) (measure.Result, error) {
	dir, err := os.MkdirTemp("", "wkworkflow-")
	if err != nil {
		return measure.Result{}, err
	}
	defer os.RemoveAll(dir)
	data, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "server.log")
	opts := measure.Options{Read: measure.Request{Method: "GET", Path: "/actor/wf/{name}/ping"}}
	record := srv
	record.ServeArgs = []string{"--cpu-budget-ms", "60000"}
	opts.Server = record
	s, err := measure.Start(opts, data, logPath)
	if err != nil {
		return measure.Result{}, err
	}
	for _, n := range sizes {
		id := "n" + strconv.Itoa(n)
		if _, err := post(s.URL(), "/actor/wf/"+id+"/setup?n="+strconv.Itoa(n)); err != nil {
			s.Stop()
			return measure.Result{}, err
		}
		for { // each run records what its budget allows
			answer, err := post(s.URL(), "/actor/wf/"+id+"/run")
			if err != nil {
				s.Stop()
				return measure.Result{}, err
			}
			if answer == strconv.Itoa(n)+" parked" {
				break
			}
		}
	}
	if err := s.Stop(); err != nil {
		return measure.Result{}, err
	}
	opts.Server = srv
	if s, err = measure.Start(opts, data, logPath); err != nil {
		return measure.Result{}, err
	}
	defer s.Stop()
	engine, err := srv.Engine(logPath)
	if err != nil {
		return measure.Result{}, err
	}
	res := measure.Result{Engine: engine, Guest: "go-workflow", DataFS: measure.DataFS(dir)}
	var floor time.Duration
	for _, n := range sizes {
		id := "n" + strconv.Itoa(n)
		want := strconv.Itoa(n) + " parked"
		if _, err := post(s.URL(), "/actor/wf/"+id+"/run"); err != nil { // wakes the actor
			return measure.Result{}, err
		}
		times := make([]time.Duration, runs)
		for i := range times {
			start := time.Now()
			answer, err := post(s.URL(), "/actor/wf/"+id+"/run")
			times[i] = time.Since(start)
			if err != nil || answer != want {
				return measure.Result{}, fmt.Errorf("run of %s: %q %v, want %q%s", id, answer, err, want, s.LogTail())
			}
		}
		p50, p99 := measure.Percentile(times, 0.5), measure.Percentile(times, 0.99)
		if n == 0 {
			floor = p50
		}
		res.Rows = append(res.Rows,
			measure.Row{Metric: "workflow_run_p50_n" + strconv.Itoa(n), Value: measure.Ms(p50), Unit: "ms"},
			measure.Row{Metric: "workflow_run_p99_n" + strconv.Itoa(n), Value: measure.Ms(p99), Unit: "ms"},
			measure.Row{Metric: "workflow_replay_over_floor_n" + strconv.Itoa(n), Value: measure.Ms(p50 - floor), Unit: "ms"})
		fmt.Fprintf(stdout, "%s: n=%d p50 %.2f ms, p99 %.2f ms, over the floor %.2f ms\n", engine, n, measure.Ms(p50), measure.Ms(p99), measure.Ms(p50-floor))
	}
	return res, nil
}

// post sends a POST and returns the body of its 200, trimmed.
func post(base, path string) (string, error) {
	resp, err := http.Post(base+path, "", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("POST %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return strings.TrimSpace(string(b)), nil
}
