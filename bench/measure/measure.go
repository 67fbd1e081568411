// Package measure measures one server serving one actor class (a WasmKeep
// node, or workerd serving the counter as a Durable Object): it starts the
// server as a child process, drives it over loopback HTTP/1.1 keep-alive and
// reads the server's memory and CPU time from /proc/<pid>, so it runs on
// Linux only. bench/README.md defines each row.
package measure

import (
	"cmp"
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

// Options says what to measure.
type Options struct {
	Server Server // what to start
	Class  string // the actor class the server serves
	// Read and Write are the requests of the read and write rows; the
	// throughput run sends either, with even odds. Zero means GET and POST
	// /actor/<Class>/{name}.
	Read, Write Request
	// Ready, if set, is a path the server answers 200 at once it is ready
	// (a node of a cluster: /_wasmkeep/ready, which may answer 503 for a
	// moment after it listens); a start then waits for it before the first
	// request.
	Ready string
	// DurableWrite, if set, is the request of the durable write rows: a
	// write that answers once it is on disk (exec-durable).
	DurableWrite Request
	// Counter says the actor is the counter (examples/counter): every answer
	// must be a number, each write the previous value plus one, and a value
	// written must still be there after a restart, so that a run cannot
	// time an error path that answers 200.
	Counter bool
	// Engine and Guest label the result in the CSV, and Label in a table;
	// an empty Engine means what Server.Engine reads in the server's log,
	// an empty Label the engine.
	Engine, Guest, Label string
	Quick                bool      // small counts, to check the harness rather than to measure
	Progress             io.Writer // one line per phase; nil for none
}

// Request is one HTTP request to an actor; {name} in Path stands for the
// actor's name.
type Request struct {
	Method, Path, Body string
}

// ParseRequest reads "METHOD PATH [BODY]", such as
// "POST /actor/chat/{name} hello": the body is everything after the path.
func ParseRequest(s string) (Request, error) {
	method, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	path, body, _ := strings.Cut(rest, " ")
	r := Request{Method: method, Path: path, Body: body}
	if method == "" || !strings.HasPrefix(path, "/") {
		return r, fmt.Errorf("request %q: want METHOD PATH [BODY], such as \"GET /actor/counter/{name}\"", s)
	}
	// Without {name} every request goes to one actor, and the rows that
	// wake many actors would measure one.
	if !strings.Contains(path, "{name}") {
		return r, fmt.Errorf("request %q: the path needs {name}, which each request replaces with an actor's name", s)
	}
	return r, nil
}

func (r Request) String() string { return strings.TrimSpace(r.Method + " " + r.Path + " " + r.Body) }

// to builds the request to the actor called name at base.
func (r Request) to(base, name string) (*http.Request, error) {
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	return http.NewRequest(r.Method, base+strings.ReplaceAll(r.Path, "{name}", name), body)
}

// Result is one run's rows, in the order bench/README.md lists them.
type Result struct {
	Engine, Guest, Label string
	DataFS               string // the file system of the servers' data directories
	Rows                 []Row
}

// Row is one measured metric.
type Row struct {
	Metric string
	Value  float64
	Unit   string
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
// is (RSS with every actor awake - RSS with baseActors awake) / the rest,
// and the same with PSS.
const baseActors = 10

// maxInstances is far above the actors a run wakes (actors + newActors + a
// few), so the server never evicts one and the run never measures wakes.
const maxInstances = 4096

// Run measures every row, on servers of its own with data directories in a
// scratch directory under TMPDIR, which it removes.
func Run(opts Options) (Result, error) {
	if opts.Server == nil {
		return Result{}, errors.New("measure: Options.Server is nil: say which server to start")
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Read == (Request{}) {
		opts.Read = Request{Method: http.MethodGet, Path: "/actor/" + opts.Class + "/{name}"}
	}
	if opts.Write == (Request{}) {
		opts.Write = Request{Method: http.MethodPost, Path: "/actor/" + opts.Class + "/{name}"}
	}
	sz := full
	if opts.Quick {
		sz = quick
	}
	scratch, err := os.MkdirTemp("", "wkbench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(scratch)
	res := Result{Guest: opts.Guest, DataFS: dataFS(scratch)}
	fmt.Fprintf(opts.Progress, "  %v; %v; data in %s (%s); load average %s\n", opts.Server, sz, scratch, res.DataFS, loadAverage())
	b := &bench{opts: opts, sz: sz, scratch: scratch}
	res.Rows, res.Engine, err = b.measure()
	res.Label = cmp.Or(opts.Label, res.Engine)
	return res, err
}

// bench holds one run's settings; each method measures one or two rows.
type bench struct {
	opts    Options
	sz      sizes
	scratch string
	dataDir string // the data directory the start-ups leave to the other rows
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.opts.Progress, "  "+format+"\n", args...)
}

// measure runs every row, on servers of its own, and returns the rows and
// the engine the server used.
func (b *bench) measure() ([]Row, string, error) {
	var out []Row
	add := func(name string, v float64, unit string) { out = append(out, Row{name, v, unit}) }

	fresh, freshData, restart, err := b.startups()
	if err != nil {
		return nil, "", err
	}
	add("startup_to_first_response", Ms(percentile(fresh, 0.5)), "ms")
	add("startup_to_first_response_fresh_data", Ms(percentile(freshData, 0.5)), "ms")
	add("startup_to_first_response_restart", Ms(percentile(restart, 0.5)), "ms")

	// The other rows are a running deployment's: the server starts on the
	// data directory the start-ups left, where the guest is compiled, and
	// they wait for its pre-initialised snapshot if it asks for one (ADR
	// 1040; the start-ups stop at their first answer, often before the
	// background work keeps it), rather than measuring first requests
	// beside a background compile, served by the module before its
	// snapshot.
	dir := b.dataDir
	srv, _, err := startServer(b.opts, dir, dir+".onserver.log")
	if err != nil {
		return nil, "", err
	}
	if p, ok := b.opts.Server.(PreinitServer); ok {
		err = srv.await(func() bool { return p.Preinitialised(srv.LogPath) }, "a pre-initialised snapshot")
	}
	var rows []Row
	if err == nil {
		rows, err = b.onServer(srv)
	}
	if err != nil {
		// The answer alone rarely says why; the server's log may.
		err = fmt.Errorf("%w%s", err, srv.logTail())
	}
	if stopErr := srv.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, "", err
	}
	engine := b.opts.Engine
	if engine == "" {
		if engine, err = b.opts.Server.Engine(srv.LogPath); err != nil {
			return nil, "", fmt.Errorf("%w%s", err, srv.logTail())
		}
	}
	return append(out, rows...), engine, nil
}

// startups starts and stops the server sz.starts times on fresh data
// directories, each with an empty cache (a first start on a machine: the
// guest compiled from scratch, actor x created); as many times on fresh data
// directories with the last one's cache (a new node on a machine that ran
// one: a server without a cache apart from its data compiles again); then
// as many times on the last fresh data directory (whatever the server keeps
// between runs reused, actor x woken from its database), which the later
// rows use, as b.dataDir, with that cache (b.opts.Server). For the counter,
// the last fresh start adds one to x and every restart must still read it.
func (b *bench) startups() (fresh, freshData, restart []time.Duration, err error) {
	startStop := func(dir string, samples *[]time.Duration, then func(*client) error) error {
		srv, took, err := startServer(b.opts, dir, dir+".log")
		if err != nil {
			return err
		}
		*samples = append(*samples, took)
		if b.opts.Counter {
			err = then(b.newClient(srv, 1))
		}
		if stopErr := srv.stop(); err == nil {
			err = stopErr
		}
		return err
	}
	newDir := func(prefix string) (string, error) { return os.MkdirTemp(b.scratch, prefix) }
	none := func(*client) error { return nil }
	server := b.opts.Server
	for i := range b.sz.starts {
		if c, ok := server.(CacheServer); ok {
			cache, err := newDir("cache-")
			if err != nil {
				return nil, nil, nil, err
			}
			b.opts.Server = c.WithCacheDir(cache)
		}
		if b.dataDir, err = newDir("data-"); err != nil {
			return nil, nil, nil, err
		}
		then := none
		if i == b.sz.starts-1 {
			then = func(c *client) error { return c.expect(b.opts.Write, "x", 1) }
		}
		if err := startStop(b.dataDir, &fresh, then); err != nil {
			return nil, nil, nil, err
		}
	}
	b.logf("start-up on a fresh data dir and cache: %v", fresh)
	for range b.sz.starts {
		dir, err := newDir("data-")
		if err != nil {
			return nil, nil, nil, err
		}
		if err := startStop(dir, &freshData, none); err != nil {
			return nil, nil, nil, err
		}
	}
	b.logf("start-up on a fresh data dir, the cache kept: %v", freshData)
	for range b.sz.starts {
		persisted := func(c *client) error {
			if err := c.expect(b.opts.Read, "x", 1); err != nil {
				return fmt.Errorf("after a restart: %w", err)
			}
			return nil
		}
		if err := startStop(b.dataDir, &restart, persisted); err != nil {
			return nil, nil, nil, err
		}
	}
	b.logf("start-up on the previous data dir: %v", restart)
	return fresh, freshData, restart, nil
}

// onServer measures the rows that need one long-running server, in an order
// where each phase leaves the next what it needs: the memory phase wakes the
// actors the throughput phase uses.
func (b *bench) onServer(srv *server) ([]Row, error) {
	// An actor holds four files (database and WAL, SQLite's descriptors and
	// the storage plugin's); run out of them and the rows measure errors.
	total := 2 + b.sz.newActors + b.sz.actors
	if limit, err := srv.openFileLimit(); err != nil {
		return nil, err
	} else if need := int64(256 + 4*total); limit < need {
		return nil, fmt.Errorf("the server may hold %d open files for %d actors but its limit is %d: raise the hard limit (ulimit -Hn)", need, total, limit)
	}
	var out []Row
	add := func(name string, v float64, unit string) { out = append(out, Row{name, v, unit}) }

	seq := b.newClient(srv, 1)
	firsts, err := b.firstRequests(seq)
	if err != nil {
		return nil, err
	}
	add("first_request_new_actor_p50", Us(percentile(firsts, 0.5)), "us")

	reads, writes, durable, err := b.resident(seq)
	if err != nil {
		return nil, err
	}
	add("read_resident_p50", Us(percentile(reads, 0.5)), "us")
	add("read_resident_p99", Us(percentile(reads, 0.99)), "us")
	add("write_resident_p50", Us(percentile(writes, 0.5)), "us")
	add("write_resident_p99", Us(percentile(writes, 0.99)), "us")
	if durable != nil {
		add("write_durable_resident_p50", Us(percentile(durable, 0.5)), "us")
		add("write_durable_resident_p99", Us(percentile(durable, 0.99)), "us")
	}

	if err := srv.alone(); err != nil {
		return nil, err
	}
	pool := b.newClient(srv, b.sz.clients)
	before, after, activations, err := b.memory(srv, pool)
	if err != nil {
		return nil, err
	}
	woken := float64(b.sz.actors - baseActors)
	add("memory_per_resident_actor", float64(after.rss-before.rss)/woken, "KiB")
	add("memory_per_resident_actor_pss", float64(after.pss-before.pss)/woken, "KiB")
	add("server_rss_resident_actors", float64(after.rss)/1024, "MiB")
	add("server_pss_resident_actors", float64(after.pss)/1024, "MiB")
	add("resident_actors", float64(b.sz.actors), "actors")
	add("new_actor_activation_p50", Us(percentile(activations, 0.5)), "us")

	rate, cpu, err := b.throughput(srv, pool)
	if err != nil {
		return nil, err
	}
	if err := srv.alone(); err != nil {
		return nil, err
	}
	add("throughput", rate, "req/s")
	add("server_cpu_per_request", cpu, "us")
	add("throughput_clients", float64(b.sz.clients), "clients")
	return out, nil
}

// firstRequests times one read to each of sz.newActors actors that do not
// exist yet: the server creates the database and runs on-init.
func (b *bench) firstRequests(c *client) ([]time.Duration, error) {
	var ds []time.Duration
	for i := range b.sz.newActors {
		start := time.Now()
		if _, err := c.do(b.opts.Read, "new-"+strconv.Itoa(i)); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	b.logf("first requests to %d new actors", len(ds))
	return ds, nil
}

// resident times reads, then writes, then durable writes if the run has
// them, to one actor that stays awake, on one kept-alive connection, after
// a warm-up of each. With Options.Counter every write must answer the
// previous value plus one.
func (b *bench) resident(c *client) (reads, writes, durable []time.Duration, err error) {
	const name = "resident"
	value, err := c.do(b.opts.Read, name)
	if err != nil {
		return nil, nil, nil, err
	}
	write := func(r Request) error {
		v, err := c.do(r, name)
		if err != nil {
			return err
		}
		if b.opts.Counter && v != value+1 {
			return fmt.Errorf("%v to %s answered %d after %d: the counter did not count", r, name, v, value)
		}
		value = v
		return nil
	}
	timed := func(n int, send func() error) ([]time.Duration, error) {
		ds := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if err := send(); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(start))
		}
		return ds, nil
	}
	read := func() error { _, err := c.do(b.opts.Read, name); return err }
	for range b.sz.warmup {
		if err := read(); err != nil {
			return nil, nil, nil, err
		}
		if err := write(b.opts.Write); err != nil {
			return nil, nil, nil, err
		}
	}
	if reads, err = timed(b.sz.samples, read); err != nil {
		return nil, nil, nil, err
	}
	if writes, err = timed(b.sz.samples, func() error { return write(b.opts.Write) }); err != nil {
		return nil, nil, nil, err
	}
	if b.opts.DurableWrite != (Request{}) {
		durableWrite := func() error { return write(b.opts.DurableWrite) }
		if _, err = timed(b.sz.warmup, durableWrite); err != nil {
			return nil, nil, nil, err
		}
		if durable, err = timed(b.sz.samples, durableWrite); err != nil {
			return nil, nil, nil, err
		}
	}
	b.logf("%d reads, %d writes and %d durable writes to a resident actor", len(reads), len(writes), len(durable))
	return reads, writes, durable, nil
}

// memory wakes sz.actors actors and returns the server's footprint with
// the first baseActors awake and with all of them.
//
// The actors it wakes are new (their databases are created): the time of
// each request of the second wake, sz.clients at once, is activations.
func (b *bench) memory(srv *server, c *client) (before, after footprint, activations []time.Duration, err error) {
	var mu sync.Mutex
	wake := func(from, to int, times *[]time.Duration) error {
		var next atomic.Int64
		next.Store(int64(from))
		return fanOut(b.sz.clients, func(stop *atomic.Bool) error {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= to {
					return nil
				}
				start := time.Now()
				if _, err := c.do(b.opts.Read, actorName(i)); err != nil {
					return err
				}
				mu.Lock()
				*times = append(*times, time.Since(start))
				mu.Unlock()
			}
			return nil
		})
	}
	var first []time.Duration
	if err = wake(0, baseActors, &first); err != nil {
		return
	}
	if before, err = srv.footprint(); err != nil {
		return
	}
	if err = wake(baseActors, b.sz.actors, &activations); err != nil {
		return
	}
	if after, err = srv.footprint(); err != nil {
		return
	}
	b.logf("RSS %d KiB, PSS %d KiB with %d actors awake; RSS %d KiB, PSS %d KiB with %d",
		before.rss, before.pss, baseActors, after.rss, after.pss, b.sz.actors)
	return
}

func actorName(i int) string { return "a-" + strconv.Itoa(i) }

// throughput runs sz.clients clients, each sending a read or a write (even
// odds) to a random one of the sz.actors awake actors: first for
// sz.loadWarmup, as an actor's first requests after waking are slower, then
// for sz.duration. It returns the requests per second of the second run and the
// server's CPU time per request in µs over it.
func (b *bench) throughput(srv *server, c *client) (perSecond, cpuPerRequestUS float64, err error) {
	load := func(d time.Duration) (int64, error) {
		var done atomic.Int64
		deadline := time.Now().Add(d)
		err := fanOut(b.sz.clients, func(stop *atomic.Bool) error {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for !stop.Load() && time.Now().Before(deadline) {
				req := b.opts.Read
				if rng.IntN(2) == 1 {
					req = b.opts.Write
				}
				if _, err := c.do(req, actorName(rng.IntN(b.sz.actors))); err != nil {
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
	return float64(n) / elapsed.Seconds(), Us((cpuAfter - cpuBefore) / time.Duration(n)), nil
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

// client sends requests to actors over kept-alive connections.
type client struct {
	http    *http.Client
	base    string
	counter bool // answers must be numbers
}

// newClient keeps up to conns connections to srv open, and never opens more.
func (b *bench) newClient(srv *server, conns int) *client {
	return &client{base: srv.Base, counter: b.opts.Counter, http: &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		DisableCompression:  true,
	}}}
}

// expect sends r to the counter called name and checks that it answers
// want.
func (c *client) expect(r Request, name string, want int64) error {
	v, err := c.do(r, name)
	if err == nil && v != want {
		err = fmt.Errorf("%v to %s answered %d, want %d", r, name, v, want)
	}
	return err
}

// do sends r to the actor called name and, for the counter, returns the
// value it answered; a status outside 2xx is an error naming the request.
func (c *client) do(r Request, name string) (int64, error) {
	req, err := r.to(c.base, name)
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
		return 0, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL.Path, err)
	}
	if !succeeded(resp) {
		return 0, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	if !c.counter {
		return 0, nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: answer %q is not a number", req.Method, req.URL.Path, body)
	}
	return v, nil
}

// succeeded says the server answered a 2xx: an actor may create with 201
// or answer 204.
func succeeded(resp *http.Response) bool { return resp.StatusCode/100 == 2 }

// percentile is the nearest-rank q-quantile of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[max(rank, 1)-1]
}

// Ms and Us are d in milliseconds and microseconds, for tables and CSVs.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func Us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
