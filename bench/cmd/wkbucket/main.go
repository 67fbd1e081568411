//go:build linux

// wkbucket measures a node with a bucket (issue 14's benchmarks; the
// book's "Restore against history length"), each server a `wasmkeep serve`
// child process over loopback, the counter example (examples/counter) its
// actor:
//
//   - durable writes: POST /actor/counter/<name>/durable (exec-durable),
//     one at a time, cycling over -actors resident actors, on a node alone
//     ("local": exec-durable syncs the local log) and on nodes with a
//     bucket (--bucket, exec-durable answering once the bucket acknowledged
//     the segment): bucket-fs ("fs"), bucket-s3 on VersityGW ("s3") and, if
//     asked, on MinIO ("minio"), both on loopback. Every store is measured
//     in each of -rounds rounds, on a server and a data directory of its
//     own, so a slow minute of a shared machine falls on all of them; p50
//     and p99 are over the rounds' writes together, and the ratios to
//     local are of one run.
//   - restore against history length: counters given N plain writes each
//     (one segment a write) on a node with a bucket, once with the default
//     --history-retention-secs (as written: nothing is collected) and once
//     with 0 (after collection: each acknowledged periodic snapshot lets
//     garbage collection delete what precedes it); then, -restore-runs
//     times, the data directory deleted, a node started on the bucket and,
//     once it answers, the first request to each counter timed (a GET:
//     the ownership record's acquisition, the listing, the plan, the reads
//     and their application, the wake and the answer).
//   - with -check, a durability check on each store: durable writes from 8
//     clients to 16 actors, a clean stop, the data directory deleted and a
//     start: every acknowledged value must be there; then writes again, a
//     SIGKILL at a random moment, the data directory deleted and a start:
//     none lost. The local store is the control: it must lose them all.
//
// It prints tables and writes <out>/<date>-<commit>-bucket.csv.
//
//	wkbucket -wasmkeep BIN -guest counter.wasm [-stores local,fs,s3] [-restore-stores fs] [-check] [-quick]
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal("wkbucket: ", err)
	}
}

// config is the run's flags.
type config struct {
	bin, guest     string
	stores         []string
	restoreStores  []string
	actors, writes int
	rounds         int
	history        []int
	restoreRuns    int
	check          bool
	checkWrites    int
	shortLease     bool
	tmp            string
	out            string
}

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("wkbucket", flag.ContinueOnError)
	var c config
	fl.StringVar(&c.bin, "wasmkeep", "", "the server binary (required)")
	fl.StringVar(&c.guest, "guest", "", "examples/counter built for wasip1 (required)")
	stores := fl.String("stores", "local,fs,s3", "the durable-write rows' stores, the first the ratios' base: local, fs, s3 (VersityGW), minio")
	restoreStores := fl.String("restore-stores", "fs", "the restore rows' stores (fs, s3, minio); empty: none")
	fl.IntVar(&c.actors, "actors", 10, "resident actors the durable writes cycle over")
	fl.IntVar(&c.writes, "writes", 500, "timed durable writes per store and round")
	fl.IntVar(&c.rounds, "rounds", 3, "rounds of every store")
	history := fl.String("history", "10,100,1000,10000", "history lengths (writes) of the restore rows")
	fl.IntVar(&c.restoreRuns, "restore-runs", 5, "restores of each history (a node started on an empty data directory each)")
	fl.BoolVar(&c.check, "check", false, "run the durability check on each store of -stores")
	fl.IntVar(&c.checkWrites, "check-writes", 400, "durable writes before the check's clean stop")
	fl.BoolVar(&c.shortLease, "short-lease", false, "a 2 s node lease (WASMKEEP_CLUSTER__*): a start waits 2 s, not the default ttl + grace of 15 s; nothing else changes")
	quick := fl.Bool("quick", false, "small counts: checks the harness, measures nothing worth keeping")
	fl.StringVar(&c.out, "out", "bench/results", "where the CSV goes")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if c.bin == "" || c.guest == "" {
		return fmt.Errorf("-wasmkeep and -guest are required (bench/README.md, wkbucket)")
	}
	if *quick {
		c.writes, c.rounds, c.restoreRuns, c.checkWrites, c.shortLease = 30, 1, 1, 40, true
		*history = "10,100"
	}
	c.stores = split(*stores)
	c.restoreStores = split(*restoreStores)
	for _, s := range split(*history) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-history: %q is not a number of writes", s)
		}
		c.history = append(c.history, n)
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return err
	}
	if c.tmp, err = os.MkdirTemp("", "wkbucket-"); err != nil {
		return err
	}
	defer os.RemoveAll(c.tmp)

	open := map[string]*store{}
	defer func() {
		for _, st := range open {
			st.stop()
		}
	}()
	for _, kind := range slices.Concat(c.stores, c.restoreStores) {
		if open[kind] != nil {
			continue
		}
		st, err := openStore(kind, c.tmp)
		if err != nil {
			return err
		}
		open[kind] = st
	}
	res := measure.Result{Guest: "go-counter", DataFS: measure.DataFS(c.tmp)}
	fmt.Fprintf(stdout, "wkbucket: %s at %s, data on %s, load %s\n", c.bin, commit, res.DataFS, measure.LoadAverage())
	if len(c.stores) > 0 {
		rows, engine, err := c.durable(stdout, open)
		if err != nil {
			return err
		}
		res.Rows, res.Engine = append(res.Rows, rows...), engine
	}
	for _, kind := range c.restoreStores {
		rows, err := c.restore(stdout, open[kind])
		if err != nil {
			return fmt.Errorf("restore on %s: %w", kind, err)
		}
		res.Rows = append(res.Rows, rows...)
	}
	if c.check {
		for _, kind := range c.stores {
			rows, err := c.durability(stdout, open[kind])
			if err != nil {
				return fmt.Errorf("durability check on %s: %w", kind, err)
			}
			res.Rows = append(res.Rows, rows...)
		}
	}
	fmt.Fprintf(stdout, "load at the end: %s\n", measure.LoadAverage())
	if res.Engine == "" {
		res.Engine = "wazero"
	}
	path, err := measure.WriteCSV(c.out, commit, "-bucket", res)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// nodeID names every node the bench starts: one at a time per prefix.
const nodeID = "bench"

// server is `wasmkeep serve` on st under prefix, with extra arguments.
func (c *config) server(st *store, prefix string, extra ...string) measure.Wasmkeep {
	w := measure.Wasmkeep{Binary: c.bin, Class: "counter", Guest: c.guest, Env: slices.Clone(st.env)}
	if u := st.url(prefix); u != "" {
		w.ServeArgs = []string{"--bucket", u, "--node-id", nodeID, "--cluster-listen", "127.0.0.1:0"}
		if c.shortLease {
			w.Env = append(w.Env, "WASMKEEP_CLUSTER__TTL=2s", "WASMKEEP_CLUSTER__GRACE=0s",
				"WASMKEEP_CLUSTER__SAFETY=500ms", "WASMKEEP_CLUSTER__MAX_SKEW=0s")
		}
	}
	w.ServeArgs = append(w.ServeArgs, extra...)
	return w
}

// node is a running server and a client of it.
type node struct {
	*measure.Running
	srv     measure.Wasmkeep
	logPath string
}

// start starts srv on dataDir (its log beside it) and returns once actor x
// answers.
func start(srv measure.Wasmkeep, dataDir string) (*node, error) {
	logPath := dataDir + ".log"
	r, err := measure.Start(measure.Options{Server: srv, Read: measure.Request{Method: "GET", Path: "/actor/counter/{name}"}}, dataDir, logPath)
	if err != nil {
		return nil, err
	}
	return &node{Running: r, srv: srv, logPath: logPath}, nil
}

var client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32, DisableCompression: true}, Timeout: 2 * time.Minute}

// do sends method to the counter at path and returns the value it answered;
// anything but 200 with a number is an error.
func (n *node) do(method, path string) (int64, error) {
	req, err := http.NewRequest(method, n.URL()+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: answer %q is not a number", method, path, body)
	}
	return v, nil
}

// statusError is an answer other than 200.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// get reads an actor's count, again while the node answers 503 (Retry-After:
// a node that cannot take the actor yet), for up to half a minute: a read
// is safe to repeat, and the check is about what the bucket kept.
func (n *node) get(name string) (int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := n.do("GET", "/actor/counter/"+name)
		var se *statusError
		if !errors.As(err, &se) || se.code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
func (n *node) post(name string) (int64, error) {
	return n.do("POST", "/actor/counter/"+name)
}
func (n *node) durableWrite(name string) (int64, error) {
	return n.do("POST", "/actor/counter/"+name+"/durable")
}

// fail adds the server's last log lines to err.
func (n *node) fail(err error) error { return fmt.Errorf("%w%s", err, n.LogTail()) }

// dataDir is a fresh, empty data directory's path.
func (c *config) dataDir(what string) (string, error) {
	d, err := os.MkdirTemp(c.tmp, what+"-")
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "data"), nil
}

func ms(d time.Duration) float64 { return measure.Ms(d) }

func row(metric string, v float64, unit string) measure.Row {
	return measure.Row{Metric: metric, Value: v, Unit: unit}
}
