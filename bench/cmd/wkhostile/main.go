//go:build linux

// wkhostile measures what a hostile actor costs its neighbours (issue 12,
// items 1 to 3): a well-behaved actor's latency (the example counter) alone
// and beside hostile actors that spend their events' CPU in host calls, and
// the CPU seconds each hostile event took. Each phase runs on a server of
// its own, so that a hostile event still running cannot spill into the next.
// It prints a table and writes <out>/<date>-<commit>-hostile-<engine>.csv.
// With -before, an older build runs each phase too, just before the newer
// one, and its rows say before/<engine> in the CSV's engine column.
//
//	wkhostile -wasmkeep BIN -counter counter.wasm -hostile hostile.wasm [-engine wasmtime] [-before OLDBIN] [-phases alarm_loop,...]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// A phase is one hostile request (none for the baseline), sent over and
// over by each hostile client to an actor of its own; key names its rows
// in the CSV.
type phase struct{ name, key, path string }

var phases = []phase{
	{"alone", "alone", ""},
	{"host-call loop (alarm_get)", "alarm_loop", "/loop?call=alarm"},
	{"host-call loop (take_pending)", "pending_loop", "/loop?call=pending"},
	{"failing-statement loop", "bad_sql_loop", "/loop?call=bad-sql"},
	{"instr(16 MB, 300 KB)", "instr", "/instr?n=300"},
}

func main() {
	bin := flag.String("wasmkeep", "", "the server binary")
	before := flag.String("before", "", "an older server binary, run in turn with -wasmkeep on each phase, so that both are measured in one run on the same machine (empty: none)")
	counter := flag.String("counter", "", "examples/counter built for wasip1")
	hostile := flag.String("hostile", "", "cmd/wasmkeep/testdata/guests/hostile built for wasip1")
	engine := flag.String("engine", "", "the runtime plugin (WASMKEEP_RUNTIME__USE); empty: plugins.yaml's")
	hostiles := flag.Int("hostiles", 8, "hostile clients, each with an actor of its own (issue 12 measured 8)")
	requests := flag.Int("requests", 1000, "counter requests a phase, one at a time")
	only := flag.String("phases", "", "the phases to run, by CSV key, comma-separated (empty: all; alone always runs)")
	wait := flag.Duration("wait", 60*time.Second, "how long a hostile event may take before it is reported unfinished")
	out := flag.String("out", "bench/results", "directory for the CSV")
	flag.Parse()
	if *bin == "" || *counter == "" || *hostile == "" {
		log.Fatal("wkhostile: -wasmkeep, -counter and -hostile are required (bench/README.md, wkhostile)")
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		log.Fatal("wkhostile: ", err)
	}
	type build struct {
		label string // "" for -wasmkeep, "before/" for -before
		srv   measure.Wasmkeep
		res   measure.Result
		alone time.Duration // CPU per counter request, alone
	}
	var builds []*build
	for _, b := range []struct{ label, bin string }{{"before/", *before}, {"", *bin}} {
		if b.bin == "" {
			continue
		}
		srv := measure.Wasmkeep{Binary: b.bin, Class: "counter", Guest: *counter, ServeArgs: []string{"--actor", "hostile=" + *hostile}}
		if *engine != "" {
			srv.Env = []string{"WASMKEEP_RUNTIME__USE=" + *engine}
		}
		builds = append(builds, &build{label: b.label, srv: srv, res: measure.Result{Guest: "go-counter"}})
	}
	fmt.Printf("%-38s %9s %9s %12s %8s  %s\n", "hostile neighbour", "p50 ms", "p99 ms", "CPU s/event", "events", "hostile answers")
	for i, p := range phases {
		if i > 0 && *only != "" && !slices.Contains(strings.Split(*only, ","), p.key) {
			continue
		}
		for _, b := range builds { // in turn, phase by phase: both see the machine's load of the moment
			r, err := run(b.srv, p, *hostiles, *requests, *wait)
			if err != nil {
				log.Fatalf("wkhostile: %s%s: %v", b.label, p.name, err)
			}
			add := func(metric string, v float64, unit string) {
				b.res.Rows = append(b.res.Rows, measure.Row{Metric: metric, Value: v, Unit: unit})
			}
			name := b.label + p.name
			if i == 0 {
				b.res.Engine, b.res.DataFS = b.label+r.engine, r.dataFS
				fmt.Printf("wkhostile: %s%s at %s on %s; %d counter requests a phase, %d hostile clients\n", b.label, b.srv.Binary, commit, r.engine, *requests, *hostiles)
			}
			add("counter_p50_"+p.key, measure.Us(r.p50), "µs")
			add("counter_p99_"+p.key, measure.Us(r.p99), "µs")
			add("counter_failed_"+p.key, float64(len(r.counterFailed)), "requests")
			if p.path == "" {
				b.alone = r.cpu / time.Duration(*requests)
				fmt.Printf("%-38s %9.2f %9.2f %12s %8s  %s\n", name, measure.Ms(r.p50), measure.Ms(r.p99), "-", "-", counterTally(r.counterFailed))
				continue
			}
			cpu := "-"
			if n := len(r.answers); n > 0 {
				// The server's CPU in the phase, less what the counter's
				// requests cost alone, over the hostile events.
				perEvent := (r.cpu - b.alone*time.Duration(*requests)) / time.Duration(n)
				add("hostile_cpu_per_event_"+p.key, measure.Ms(perEvent), "ms")
				cpu = fmt.Sprintf("%.2f", perEvent.Seconds())
			}
			add("hostile_events_"+p.key, float64(len(r.answers)), "events")
			fmt.Printf("%-38s %9.2f %9.2f %12s %8d  %s%s\n", name, measure.Ms(r.p50), measure.Ms(r.p99), cpu, len(r.answers), tally(r.answers, r.unfinished), counterTally(r.counterFailed))
		}
	}
	var results []measure.Result
	for _, b := range builds {
		results = append(results, b.res)
	}
	path, err := measure.WriteCSV(*out, commit, "-hostile-"+builds[len(builds)-1].res.Engine, results...)
	if err != nil {
		log.Fatal("wkhostile: ", err)
	}
	fmt.Println("wrote", path)
}

type result struct {
	engine, dataFS string        // what served, and the file system of its data
	p50, p99       time.Duration // the counter's latency
	cpu            time.Duration // the server's, during the phase
	answers        []string      // of the hostile events that finished
	unfinished     int
	counterFailed  []string // the counter's answers other than 200
}

func run(srv measure.Wasmkeep, p phase, hostiles, requests int, wait time.Duration) (result, error) {
	dir, err := os.MkdirTemp("", "wkhostile-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "server.log")
	s, err := measure.Start(measure.Options{Server: srv, Read: measure.Request{Method: "GET", Path: "/actor/counter/{name}"}},
		filepath.Join(dir, "data"), logPath)
	if err != nil {
		return result{}, err
	}
	defer s.Stop()
	var res result
	if res.engine, err = srv.Engine(logPath); err != nil {
		return result{}, err
	}
	res.dataFS = measure.DataFS(dir)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: hostiles + 1}, Timeout: wait}
	get := func(path string) (string, error) {
		resp, err := client.Get(s.URL() + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(body)), nil
	}
	const actors = 100
	for i := range actors { // resident before timing
		if _, err := get(fmt.Sprintf("/actor/counter/c%d", i)); err != nil {
			return result{}, err
		}
	}

	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	cpu0, err := s.CPUTime()
	if err != nil {
		return result{}, err
	}
	if p.path != "" {
		for h := range hostiles {
			wg.Go(func() {
				for !stop.Load() {
					answer, err := get(fmt.Sprintf("/actor/hostile/h%d%s", h, p.path))
					mu.Lock()
					if err != nil {
						res.unfinished++
					} else {
						res.answers = append(res.answers, answer)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		time.Sleep(100 * time.Millisecond) // the hostile events are running
	}
	latencies := make([]time.Duration, requests)
	for i := range latencies {
		start := time.Now()
		answer, err := get(fmt.Sprintf("/actor/counter/c%d", i%actors))
		if err != nil {
			stop.Store(true)
			wg.Wait()
			return result{}, fmt.Errorf("counter: %v", err)
		}
		latencies[i] = time.Since(start)
		if !strings.HasPrefix(answer, "200 ") { // counted, its latency kept: a loaded machine can take a counter past its CPU budget
			res.counterFailed = append(res.counterFailed, answer)
		}
	}
	// Every hostile event started after cpu0 ends before cpu1.
	stop.Store(true)
	wg.Wait()
	cpu1, err := s.CPUTime()
	if err != nil {
		return result{}, err
	}
	res.p50, res.p99 = measure.Percentile(latencies, 0.5), measure.Percentile(latencies, 0.99)
	res.cpu = cpu1 - cpu0
	return res, nil
}

// tally counts the hostile answers by their text: "3× 500 actor exceeded ...".
func tally(answers []string, unfinished int) string {
	counts := map[string]int{}
	for _, a := range answers {
		counts[a]++
	}
	var parts []string
	for a, n := range counts {
		parts = append(parts, fmt.Sprintf("%d× %s", n, a))
	}
	if unfinished > 0 {
		parts = append(parts, fmt.Sprintf("%d unfinished", unfinished))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// counterTally is the counter's failed answers, for the table: "; counter: 1× 500 ...".
func counterTally(failed []string) string {
	if len(failed) == 0 {
		return ""
	}
	return "; counter: " + tally(failed, 0)
}
