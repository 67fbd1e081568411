//go:build linux

// Command wkqueue measures one queue (sdk/go/queue, served by
// examples/jobs/queue) on one node, on each engine of -engines: sends (one
// durable write each, single and in batches of 10) and pull+ack (a lease,
// then an ack or a settle of the batch: plain writes), each as latency of
// one operation at a time (p50, p99) and as throughput with -clients
// concurrent client actors on the one queue. The client actor is
// cmd/wasmkeep/testdata/guests/queueclient, driven over loopback HTTP, so a
// latency includes the outside request to it and its call to the queue.
// With -bucket each node is a cluster of one on bucket-fs, so that a send
// waits for the bucket. It prints a table and writes
// <out>/<date>-<commit>-queue.csv (-queue-bucket.csv).
//
//	wkqueue -wasmkeep BIN -queue queue.wasm -client queueclient.wasm [-engines wazero,wasmtime] [-quick] [-bucket]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

type config struct {
	ops      int           // timed operations one at a time, per phase
	clients  int           // concurrent clients for throughput
	duration time.Duration // of each throughput run
	prefill  int           // messages queued before each pull phase
	stdout   io.Writer
}

func main() {
	path, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wkqueue:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", path)
}

// run parses args, measures and returns the path of the CSV it wrote.
func run(args []string, stdout io.Writer) (string, error) {
	fs := flag.NewFlagSet("wkqueue", flag.ContinueOnError)
	bin := fs.String("wasmkeep", "", "the wasmkeep binary (required)")
	queueWasm := fs.String("queue", "", "the queue class, examples/jobs/queue built for wasip1 (required)")
	clientWasm := fs.String("client", "", "the client actor, cmd/wasmkeep/testdata/guests/queueclient built for wasip1 (required)")
	engines := fs.String("engines", "wazero,wasmtime", "runtime plugins to measure, comma-separated")
	out := fs.String("out", "bench/results", "directory for the CSV")
	quick := fs.Bool("quick", false, "small counts, to check the harness rather than to measure")
	bucket := fs.Bool("bucket", false, "serve each node on a new bucket-fs directory, so that a durable send answers once the bucket holds it; the CSV's name ends in -queue-bucket")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *bin == "" || *queueWasm == "" || *clientWasm == "" {
		return "", errors.New("-wasmkeep, -queue and -client are required")
	}
	c := config{ops: 1000, clients: 8, duration: 5 * time.Second, prefill: 80_000, stdout: stdout}
	if *quick {
		c = config{ops: 50, clients: 4, duration: 500 * time.Millisecond, prefill: 2_000, stdout: stdout}
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		return "", err
	}
	var results []measure.Result
	for _, engine := range strings.Split(*engines, ",") {
		srv := measure.Wasmkeep{Binary: *bin, Class: "app", Guest: *clientWasm,
			Env:       []string{"WASMKEEP_RUNTIME__USE=" + engine},
			ServeArgs: []string{"--actor", "queue=" + *queueWasm, "--access", "queue=internal"}, BucketFS: *bucket}
		fmt.Fprintf(stdout, "wkqueue: %s at %s on %s (load %s)\n", *bin, commit, engine, measure.LoadAverage())
		res, err := c.run(srv)
		if err != nil {
			return "", fmt.Errorf("%s: %w", engine, err)
		}
		results = append(results, res)
	}
	measure.PrintTable(stdout, results...)
	suffix := "-queue"
	if *bucket {
		suffix += "-bucket"
	}
	return measure.WriteCSV(*out, commit, suffix, results...)
}

// node is a running server and a client for it.
type node struct {
	url  string
	http *http.Client
}

// do sends one request that must answer 200 without a client error, and
// returns the body.
func (n *node) do(method, path, body string) (string, error) {
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 || strings.HasPrefix(string(b), "error ") {
		return "", fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return string(b), nil
}

// An op is one timed operation by client actor i on queue q; it returns
// the messages it handled (0: the queue ran dry).
type op func(n *node, i int, q string) (int, error)

var payload = strings.Repeat("x", 100)

func send(n *node, i int, q string) (int, error) {
	_, err := n.do("POST", "/actor/app/c-"+strconv.Itoa(i)+"/send?q="+q, payload)
	return 1, err
}

var batch10 = strings.Repeat(payload+"\n", 9) + payload

func sendBatch(n *node, i int, q string) (int, error) {
	_, err := n.do("POST", "/actor/app/c-"+strconv.Itoa(i)+"/batch?q="+q, batch10)
	return 10, err
}

// pullAck leases up to max messages and acks them: with Ack for one, with
// one Settle for more.
func pullAck(max int) op {
	return func(n *node, i int, q string) (int, error) {
		client := "/actor/app/c-" + strconv.Itoa(i)
		leased, err := n.do("GET", client+"/lease?q="+q+"&max="+strconv.Itoa(max)+"&vis=60000", "")
		if err != nil || leased == "" {
			return 0, err
		}
		var settle []string
		for _, line := range strings.Split(strings.TrimSuffix(leased, "\n"), "\n") {
			f := strings.Fields(line)
			settle = append(settle, f[0]+" "+f[1]+" ack")
		}
		if len(settle) == 1 {
			f := strings.Fields(settle[0])
			_, err = n.do("GET", client+"/ack?q="+q+"&id="+f[0]+"&attempt="+f[1], "")
		} else {
			_, err = n.do("POST", client+"/settle?q="+q, strings.Join(settle, "\n"))
		}
		return len(settle), err
	}
}

// phase is one row group: an operation on a queue of its own.
type phase struct {
	name    string
	op      op
	prefill bool // fill the queue before timing
}

var phases = []phase{
	{"send", send, false},
	{"send_batch10", sendBatch, false},
	{"pull_ack", pullAck(1), true},
	{"pull_ack_batch10", pullAck(10), true},
}

func (c config) run(srv measure.Wasmkeep) (measure.Result, error) {
	dir, err := os.MkdirTemp("", "wkqueue-")
	if err != nil {
		return measure.Result{}, err
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "server.log")
	s, err := measure.Start(measure.Options{Server: srv,
		Read: measure.Request{Method: "GET", Path: "/actor/app/{name}/stats?q=queue/ready"}},
		filepath.Join(dir, "data"), logPath)
	if err != nil {
		return measure.Result{}, err
	}
	defer s.Stop()
	res := measure.Result{Guest: "go-queue", DataFS: measure.DataFS(dir)}
	if res.Engine, err = srv.Engine(logPath); err != nil {
		return res, err
	}
	res.Label = res.Engine
	n := &node{url: s.URL(), http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.clients + 1}, Timeout: time.Minute}}
	for _, p := range phases {
		rows, err := c.phase(n, p)
		if err != nil {
			return res, fmt.Errorf("%s: %w\n%s", p.name, err, s.LogTail())
		}
		res.Rows = append(res.Rows, rows...)
	}
	return res, nil
}

// phase times p.op one at a time, then under c.clients concurrent clients.
func (c config) phase(n *node, p phase) ([]measure.Row, error) {
	q := "queue/bench-" + p.name
	if p.prefill {
		body := strings.Repeat(payload+"\n", 999) + payload
		for range c.prefill / 1000 {
			if _, err := n.do("POST", "/actor/app/filler/batch?q="+q, body); err != nil {
				return nil, err
			}
		}
	}
	// Warm the client actors and the queue, then time.
	for i := range c.clients {
		if _, err := p.op(n, i, q); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, 0, c.ops)
	for range c.ops {
		t0 := time.Now()
		k, err := p.op(n, 0, q)
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, errors.New("the queue ran dry during the latency run: raise -prefill")
		}
		lat = append(lat, time.Since(t0))
	}
	var handled atomic.Int64
	var stop atomic.Bool
	errs := make(chan error, c.clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				k, err := p.op(n, i, q)
				if err != nil {
					errs <- err
					stop.Store(true)
					return
				}
				if k == 0 {
					stop.Store(true) // dry: the rate so far stands
					return
				}
				handled.Add(int64(k))
			}
		}()
	}
	time.AfterFunc(c.duration, func() { stop.Store(true) })
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	perSecond := float64(handled.Load()) / elapsed.Seconds()
	p50, p99 := measure.Percentile(lat, 0.5), measure.Percentile(lat, 0.99)
	fmt.Fprintf(c.stdout, "  %-18s p50 %7.2f ms  p99 %7.2f ms  %8.0f messages/s with %d clients for %.1f s\n",
		p.name, measure.Ms(p50), measure.Ms(p99), perSecond, c.clients, elapsed.Seconds())
	return []measure.Row{
		{Metric: "queue_" + p.name + "_p50", Value: measure.Ms(p50), Unit: "ms"},
		{Metric: "queue_" + p.name + "_p99", Value: measure.Ms(p99), Unit: "ms"},
		{Metric: "queue_" + p.name + "_messages_per_s", Value: perSecond, Unit: "msg/s"},
	}, nil
}
