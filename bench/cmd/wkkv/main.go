//go:build linux

// wkkv measures the key-value shard class of sdk/go/kv (issue 17): get and
// put throughput and latency through one shard, on one node, with plain
// (local) and durable puts, on each engine. Clients send outside requests to
// caller actors (cmd/wasmkeep/testdata/guests/kvclient), each of which calls
// the shard with the Go client; every key lives in shard 0 of 4, so the
// throughput is one shard's. With -bucket each node is a cluster of one on
// bucket-fs, so that a durable put waits for the bucket. It prints a table
// and writes <out>/<date>-<commit>-kv.csv (-kv-bucket.csv).
//
//	wkkv -wasmkeep BIN -shard kv.wasm -client kvclient.wasm [-engines wazero,wasmtime] [-clients 8] [-duration 5s] [-bucket]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
)

// shards is the kvclient guest's shard count.
const shards = 4

// An op is one measured operation: a request to a caller actor with the
// key in {key}.
type op struct {
	name, key, method, path, body string
}

var ops = []op{
	{"get", "get", "GET", "/get?key={key}", ""},
	{"put, local", "put_local", "POST", "/put?local=1&key={key}", "value"},
	{"put, durable", "put_durable", "POST", "/put?key={key}", "value"},
}

func main() {
	bin := flag.String("wasmkeep", "", "the server binary")
	shard := flag.String("shard", "", "examples/jobs/kv built for wasip1")
	client := flag.String("client", "", "cmd/wasmkeep/testdata/guests/kvclient built for wasip1")
	engines := flag.String("engines", "wazero,wasmtime", "the runtime plugins to measure, one server each, in turn")
	clients := flag.Int("clients", 8, "concurrent clients, each with a caller actor of its own")
	duration := flag.Duration("duration", 5*time.Second, "how long each operation is measured")
	out := flag.String("out", "bench/results", "directory for the CSV")
	bucket := flag.Bool("bucket", false, "serve each node on a new bucket-fs directory, so that a durable put answers once the bucket holds it; the CSV's name ends in -kv-bucket")
	flag.Parse()
	if *bin == "" || *shard == "" || *client == "" {
		log.Fatal("wkkv: -wasmkeep, -shard and -client are required (bench/README.md, wkkv)")
	}
	commit, err := measure.CheckoutCommit()
	if err != nil {
		log.Fatal("wkkv: ", err)
	}
	keys := shardKeys(*clients, 0)
	fmt.Printf("wkkv: %s at %s; %d clients, %v per operation, every key in shard 0 of %d; load %s\n",
		*bin, commit, *clients, *duration, shards, measure.LoadAverage())
	fmt.Printf("%-10s %-14s %10s %9s %9s\n", "engine", "operation", "ops/s", "p50 ms", "p99 ms")
	var results []measure.Result
	for _, engine := range strings.Split(*engines, ",") {
		srv := measure.Wasmkeep{Binary: *bin, Class: "client", Guest: *client,
			ServeArgs: []string{"--actor", "kv=" + *shard, "--access", "kv=internal"},
			Env:       []string{"WASMKEEP_RUNTIME__USE=" + engine}, BucketFS: *bucket}
		res, err := run(srv, engine, keys, *duration)
		if err != nil {
			log.Fatalf("wkkv: %s: %v", engine, err)
		}
		results = append(results, res)
	}
	suffix := "-kv"
	if *bucket {
		suffix += "-bucket"
	}
	path, err := measure.WriteCSV(*out, commit, suffix, results...)
	if err != nil {
		log.Fatal("wkkv: ", err)
	}
	fmt.Println("wrote", path)
}

// shardKeys returns n keys that live in shard i of shards.
func shardKeys(n, i int) []string {
	var keys []string
	for k := 0; len(keys) < n; k++ {
		if key := "bench:" + strconv.Itoa(k); kv.ShardOf(key, shards) == i {
			keys = append(keys, key)
		}
	}
	return keys
}

func run(srv measure.Wasmkeep, engine string, keys []string, duration time.Duration) (measure.Result, error) {
	dir, err := os.MkdirTemp("", "wkkv-")
	if err != nil {
		return measure.Result{}, err
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "server.log")
	s, err := measure.Start(measure.Options{Server: srv, Read: measure.Request{Method: "GET", Path: "/actor/client/{name}/get?key=ready"}},
		filepath.Join(dir, "data"), logPath)
	if err != nil {
		return measure.Result{}, err
	}
	defer s.Stop()
	res := measure.Result{Engine: engine, Guest: "go-kv", DataFS: measure.DataFS(dir)}
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: len(keys) + 1}, Timeout: time.Minute}
	do := func(o op, client int) error {
		key := url.QueryEscape(keys[client])
		req, err := http.NewRequest(o.method, s.URL()+"/actor/client/c"+strconv.Itoa(client)+strings.ReplaceAll(o.path, "{key}", key), strings.NewReader(o.body))
		if err != nil {
			return err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.HasPrefix(string(body), "error") || strings.HasPrefix(string(body), "absent") {
			return fmt.Errorf("%s %s: %d %q%s", o.method, o.path, resp.StatusCode, body, s.LogTail())
		}
		return nil
	}
	// Every caller resident and every key written before timing.
	for i := range keys {
		if err := do(ops[2], i); err != nil {
			return measure.Result{}, err
		}
	}
	for _, o := range ops {
		var mu sync.Mutex
		var latencies []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(duration)
		for c := range keys {
			wg.Go(func() {
				var mine []time.Duration
				for time.Now().Before(deadline) {
					t0 := time.Now()
					if err := do(o, c); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if firstErr != nil {
			return measure.Result{}, firstErr
		}
		elapsed := time.Since(start)
		perSecond := float64(len(latencies)) / elapsed.Seconds()
		p50, p99 := measure.Percentile(latencies, 0.5), measure.Percentile(latencies, 0.99)
		res.Rows = append(res.Rows,
			measure.Row{Metric: "kv_" + o.key + "_per_s", Value: perSecond, Unit: "ops/s"},
			measure.Row{Metric: "kv_" + o.key + "_p50", Value: measure.Us(p50), Unit: "µs"},
			measure.Row{Metric: "kv_" + o.key + "_p99", Value: measure.Us(p99), Unit: "µs"})
		fmt.Printf("%-10s %-14s %10.0f %9.2f %9.2f\n", engine, o.name, perSecond, measure.Ms(p50), measure.Ms(p99))
	}
	return res, nil
}
