//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// bench holds one run's settings; each method measures one or two rows.
type bench struct {
	cfg      config
	sz       sizes
	scratch  string
	progress io.Writer
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "  "+format+"\n", args...)
}

// measure runs every row, on servers of its own, and returns the metrics
// and the engine the server used.
func (b *bench) measure() ([]metric, string, error) {
	var out []metric
	add := func(name string, v float64, unit string) { out = append(out, metric{name, v, unit}) }

	fresh, restart, err := b.startups()
	if err != nil {
		return nil, "", err
	}
	add("startup_to_first_response", ms(percentile(fresh, 0.5)), "ms")
	add("startup_to_first_response_restart", ms(percentile(restart, 0.5)), "ms")

	dir, err := os.MkdirTemp(b.scratch, "data-")
	if err != nil {
		return nil, "", err
	}
	srv, _, err := startServer(b.cfg, dir, dir+".log")
	if err != nil {
		return nil, "", err
	}
	rows, err := b.onServer(srv)
	if stopErr := srv.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, "", err
	}
	engine := b.cfg.engine
	if engine == "" {
		if engine, err = srv.engine(); err != nil {
			return nil, "", err
		}
	}
	return append(out, rows...), engine, nil
}

// startups starts and stops the server sz.starts times on fresh data
// directories (the guest compiled from scratch, actor x created), then as
// many times on the last of them (whatever the server keeps between runs
// reused, actor x woken from its database).
func (b *bench) startups() (fresh, restart []time.Duration, err error) {
	var dir string
	startStop := func(samples *[]time.Duration) error {
		srv, took, err := startServer(b.cfg, dir, dir+".log")
		if err != nil {
			return err
		}
		*samples = append(*samples, took)
		return srv.stop()
	}
	for range b.sz.starts {
		if dir, err = os.MkdirTemp(b.scratch, "data-"); err != nil {
			return nil, nil, err
		}
		if err := startStop(&fresh); err != nil {
			return nil, nil, err
		}
	}
	b.logf("start-up on a fresh data dir: %v", fresh)
	for range b.sz.starts {
		if err := startStop(&restart); err != nil {
			return nil, nil, err
		}
	}
	b.logf("start-up on the previous data dir: %v", restart)
	return fresh, restart, nil
}

// onServer measures the rows that need one long-running server, in an order
// where each phase leaves the next what it needs: the memory phase wakes the
// actors the throughput phase uses.
func (b *bench) onServer(srv *server) ([]metric, error) {
	// An actor holds up to three files (database, WAL, shared memory); run
	// out of them and the rows measure errors.
	total := 2 + b.sz.newActors + b.sz.actors
	if limit, err := srv.openFileLimit(); err != nil {
		return nil, err
	} else if need := int64(256 + 3*total); limit < need {
		return nil, fmt.Errorf("the server may hold %d open files for %d actors but its limit is %d: raise the hard limit (ulimit -Hn)", need, total, limit)
	}
	var out []metric
	add := func(name string, v float64, unit string) { out = append(out, metric{name, v, unit}) }

	seq := newClient(srv.base, 1)
	firsts, err := b.firstRequests(seq)
	if err != nil {
		return nil, err
	}
	add("first_request_new_actor_p50", us(percentile(firsts, 0.5)), "us")

	reads, writes, err := b.resident(seq)
	if err != nil {
		return nil, err
	}
	add("read_resident_p50", us(percentile(reads, 0.5)), "us")
	add("read_resident_p99", us(percentile(reads, 0.99)), "us")
	add("write_resident_p50", us(percentile(writes, 0.5)), "us")
	add("write_resident_p99", us(percentile(writes, 0.99)), "us")

	pool := newClient(srv.base, b.sz.clients)
	perActor, rss, err := b.memory(srv, pool)
	if err != nil {
		return nil, err
	}
	add("memory_per_resident_actor", perActor, "KiB")
	add("server_rss_resident_actors", rss, "MiB")
	add("resident_actors", float64(b.sz.actors), "actors")

	rate, cpu, err := b.throughput(srv, pool)
	if err != nil {
		return nil, err
	}
	add("throughput", rate, "req/s")
	add("server_cpu_per_request", cpu, "us")
	add("throughput_clients", float64(b.sz.clients), "clients")
	return out, nil
}

// firstRequests times one GET to each of sz.newActors actors that do not
// exist yet: the server creates the database and runs on-init.
func (b *bench) firstRequests(c *client) ([]time.Duration, error) {
	var ds []time.Duration
	for i := range b.sz.newActors {
		start := time.Now()
		if _, err := c.do(http.MethodGet, "new-"+strconv.Itoa(i)); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	b.logf("first requests to %d new actors", len(ds))
	return ds, nil
}

// resident times GETs, then POSTs, to one actor that stays awake, on one
// kept-alive connection, after a warm-up of both. Every POST must answer
// the previous value plus one, so the run cannot time an error path.
func (b *bench) resident(c *client) (reads, writes []time.Duration, err error) {
	const name = "resident"
	value, err := c.do(http.MethodGet, name)
	if err != nil {
		return nil, nil, err
	}
	for range b.sz.warmup {
		if _, err := c.do(http.MethodGet, name); err != nil {
			return nil, nil, err
		}
		if value, err = c.do(http.MethodPost, name); err != nil {
			return nil, nil, err
		}
	}
	for range b.sz.samples {
		start := time.Now()
		if _, err := c.do(http.MethodGet, name); err != nil {
			return nil, nil, err
		}
		reads = append(reads, time.Since(start))
	}
	for range b.sz.samples {
		start := time.Now()
		v, err := c.do(http.MethodPost, name)
		if err != nil {
			return nil, nil, err
		}
		writes = append(writes, time.Since(start))
		if v != value+1 {
			return nil, nil, fmt.Errorf("POST to %s answered %d after %d: the counter did not count", name, v, value)
		}
		value = v
	}
	b.logf("%d reads and %d writes to a resident actor", len(reads), len(writes))
	return reads, writes, nil
}

// memory wakes sz.actors actors and returns the server's growth per actor
// past the first baseActors, in KiB, and its total RSS with all of them
// awake, in MiB.
func (b *bench) memory(srv *server, c *client) (perActorKiB, rssMiB float64, err error) {
	wake := func(from, to int) error {
		var next atomic.Int64
		next.Store(int64(from))
		return fanOut(b.sz.clients, func(stop *atomic.Bool) error {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= to {
					return nil
				}
				if _, err := c.do(http.MethodGet, actorName(i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := wake(0, baseActors); err != nil {
		return 0, 0, err
	}
	before, err := srv.rssKiB()
	if err != nil {
		return 0, 0, err
	}
	if err := wake(baseActors, b.sz.actors); err != nil {
		return 0, 0, err
	}
	after, err := srv.rssKiB()
	if err != nil {
		return 0, 0, err
	}
	b.logf("RSS %d KiB with %d actors awake, %d KiB with %d", before, baseActors, after, b.sz.actors)
	return float64(after-before) / float64(b.sz.actors-baseActors), float64(after) / 1024, nil
}

func actorName(i int) string { return "a-" + strconv.Itoa(i) }

// throughput runs sz.clients clients, each sending GET or POST (even odds)
// to a random one of the sz.actors awake actors: first for sz.loadWarmup,
// as an actor's first requests after waking are slower, then for
// sz.duration. It returns the requests per second of the second run and the
// server's CPU time per request in µs over it.
func (b *bench) throughput(srv *server, c *client) (perSecond, cpuPerRequestUS float64, err error) {
	load := func(d time.Duration) (int64, error) {
		var done atomic.Int64
		deadline := time.Now().Add(d)
		err := fanOut(b.sz.clients, func(stop *atomic.Bool) error {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for !stop.Load() && time.Now().Before(deadline) {
				method := http.MethodGet
				if rng.IntN(2) == 1 {
					method = http.MethodPost
				}
				if _, err := c.do(method, actorName(rng.IntN(b.sz.actors))); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		})
		return done.Load(), err
	}
	if _, err := load(b.sz.loadWarmup); err != nil {
		return 0, 0, err
	}
	cpuBefore, err := srv.cpuTime()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	n, err := load(b.sz.duration)
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	cpuAfter, err := srv.cpuTime()
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, errors.New("no request completed in the throughput run")
	}
	b.logf("%d requests in %v, server CPU %v", n, elapsed.Round(time.Millisecond), cpuAfter-cpuBefore)
	return float64(n) / elapsed.Seconds(), us((cpuAfter - cpuBefore) / time.Duration(n)), nil
}

// fanOut runs fn on n goroutines and returns their errors; after the first
// error, stop tells the others to finish.
func fanOut(n int, fn func(stop *atomic.Bool) error) error {
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		errs = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			if errs[i] = fn(&stop); errs[i] != nil {
				stop.Store(true)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// client sends requests to counter actors over kept-alive connections.
type client struct {
	http *http.Client
	base string
}

// newClient keeps up to conns connections open, and never opens more.
func newClient(base string, conns int) *client {
	return &client{base: base, http: &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
	}}}
}

// do sends method to the counter called name and returns the value it
// answered; any status but 200 is an error.
func (c *client) do(method, name string) (int64, error) {
	req, err := http.NewRequest(method, c.base+"/actor/counter/"+name, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("%s %s: reading the answer: %w", method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: answer %q is not a number", method, req.URL.Path, body)
	}
	return v, nil
}

// percentile is the nearest-rank q-quantile of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
