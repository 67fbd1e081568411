package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func TestCounterPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := node.Options{DataDir: dir, Classes: map[string]string{"counter": counter(t)}}
	n := startNode(t, opts)
	n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
	n.expect("POST", "/actor/counter/alice", "", 200, "2\n")
	n.stop()

	n = startNode(t, opts)
	n.expect("GET", "/actor/counter/alice", "", 200, "2\n")
	n.expect("POST", "/actor/counter/alice", "", 200, "3\n")
}

func TestTwoNamesAreTwoDatabases(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"counter": counter(t)}})
	n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
	n.expect("POST", "/actor/counter/alice", "", 200, "2\n")
	n.expect("POST", "/actor/counter/bob", "", 200, "1\n")
	n.expect("POST", "/actor/counter/room%201", "", 200, "1\n")
	for _, f := range []string{"alice.db", "bob.db", "room%201.db"} {
		if _, err := os.Stat(filepath.Join(dir, "state", "default", "default", "actors", "default", "counter", f)); err != nil {
			t.Errorf("database file: %v", err)
		}
	}
}

func TestRouting(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	n.expect("GET", "/actor/probe/a/echo?x=1&y=%20", "", 200, "GET /echo?x=1&y=%20 0")
	n.expect("POST", "/actor/probe/a/echo", "hello", 200, "POST /echo? 5")
	n.expect("GET", "/actor/probe/room%201/self", "", 200, "default/probe/room 1")
	n.expect("GET", "/actor/nope/a", "", 404, "unknown class \"nope\"\n")
	for _, bad := range []string{"/actor/probe/..", "/actor/probe/%2e", "/actor/probe/a%2Fb", "/actor/probe/a%01", "/actor/probe/" + strings.Repeat("x", 257), "/actor/probe"} {
		if code, _ := n.do("GET", bad, ""); code != 400 {
			t.Errorf("GET %s: %d, want 400", bad, code)
		}
	}
	n.expect("GET", "/_wasmkeep/health", "", 200, "ok\n")
	n.expect("GET", "/_wasmkeep/ready", "", 200, "ready\n")
	n.expect("GET", "/elsewhere", "", 404, "404 page not found\n")

	code, body, hdr := n.doH("GET", "/actor/probe/a/status?code=201", "", nil)
	if code != 201 || body != "status" || hdr.Get("X-Probe") != "yes" {
		t.Errorf("status probe: %d %q %v", code, body, hdr)
	}
	if v := hdr.Values(peers.NotHeldHeader); len(v) != 0 {
		t.Errorf("the guest's %s header reached the client: %q; only a node says it", peers.NotHeldHeader, v)
	}
}

func TestClientCannotForgeHostHeaders(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	_, body, _ := n.doH("GET", "/actor/probe/a/headers", "", http.Header{
		"X-Wasmkeep-Caller": {"default/admin/root"},
		"X-Wasmkeep-Other":  {"x"},
		"X-Mine":            {"kept"},
	})
	if strings.Contains(body, "x-wasmkeep") || !strings.Contains(body, "x-mine=kept") {
		t.Errorf("headers the actor saw:\n%s", body)
	}
}

func TestBodyLimit(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, MaxBodyBytes: 1 << 20})
	n.expect("POST", "/actor/probe/a/echo", strings.Repeat("x", 1<<20), 200, fmt.Sprintf("POST /echo? %d", 1<<20))
	if code, _ := n.do("POST", "/actor/probe/a/echo", strings.Repeat("x", 1<<20+1)); code != 413 {
		t.Errorf("declared oversize body: %d, want 413", code)
	}
	// A chunked body declares no length: it is cut while read.
	req, _ := http.NewRequest("POST", n.url+"/actor/probe/a/echo", struct{ *strings.Reader }{strings.NewReader(strings.Repeat("x", 1<<20+1))})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked oversize body: %d, want 413", resp.StatusCode)
	}
}

// Requests to one actor run one at a time, in arrival order; another actor
// is not held up meanwhile.
func TestOneEventAtATimeInOrder(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, AllowOutbound: loopback})
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")

	var wg sync.WaitGroup
	send := func(path string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := n.do("POST", path, ""); code != 200 {
				t.Errorf("%s: %d %s", path, code, body)
			}
		}()
	}
	send("/actor/probe/a/fetch?url=" + url.QueryEscape(srv.URL)) // holds the actor while the others queue
	awaitHeld(t, arrived)
	for i := 1; i <= 9; i++ {
		send(fmt.Sprintf("/actor/probe/a/seen?seq=%d&ms=5", i))
		// Each queued before the next is sent: arrival order is the loop's.
		waitFor(t, 10*time.Second, "the event to queue", func() bool { return n.metric("wasmkeep_events_queued") == float64(i) })
	}
	// Another actor answers while a is busy.
	n.expect("POST", "/actor/probe/b/seen?seq=99&ms=0", "", 200, "ok 99")
	close(release)
	code, body := n.do("POST", "/actor/probe/a/query", "SELECT group_concat(seq) FROM seen")
	wg.Wait()
	if code != 200 || body != "ok 1,2,3,4,5,6,7,8,9" {
		t.Fatalf("order of events: %d %q", code, body)
	}
}

func TestQueueFull(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, QueueLimit: 4, AllowOutbound: loopback})
	var wg sync.WaitGroup
	codes := make(chan int, 10)
	for i := 0; i < 6; i++ {
		path := fmt.Sprintf("/actor/probe/a/seen?seq=%d&ms=0", i)
		if i == 0 { // holds the actor
			path = "/actor/probe/a/fetch?url=" + url.QueryEscape(srv.URL)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := n.do("POST", path, "")
			codes <- code
		}()
		if i == 0 {
			awaitHeld(t, arrived)
		} else if i < 5 {
			waitFor(t, 10*time.Second, "the event to queue", func() bool { return n.metric("wasmkeep_events_queued") == float64(i) })
		}
	}
	waitFor(t, 10*time.Second, "the refusal", func() bool { return len(codes) == 1 })
	close(release)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	// One running, four queued, the sixth refused.
	if count[200] != 5 || count[429] != 1 {
		t.Fatalf("status counts %v, want 5×200 and 1×429", count)
	}
}

func TestRequestWhoseClientLeftIsNotRun(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, AllowOutbound: loopback})
	n.expect("POST", "/actor/probe/a/seen?seq=1&ms=0", "", 200, "ok 1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.do("POST", "/actor/probe/a/fetch?url="+url.QueryEscape(srv.URL), "")
	}()
	awaitHeld(t, arrived)
	leaveQueued(t, n, "/actor/probe/a/seen?seq=2&ms=0")
	close(release)
	<-done
	n.expect("POST", "/actor/probe/a/query", "SELECT group_concat(seq) FROM seen", 200, "ok 1")
}

// leaveQueued sends a request to a busy actor and leaves once it is queued,
// then waits for the server to close its connection: its handler has seen
// the client leave (the request's context is done) by then, so the queued
// event will not run.
func leaveQueued(t *testing.T, n *testNode, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var client atomic.Value // the connection's local address
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
		client.Store(c.Conn.LocalAddr().String())
	}})
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", n.url+path, nil)
		// A connection of its own: closing it is how the client leaves.
		_, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the request to queue", func() bool { return n.metric("wasmkeep_events_queued") == 1 })
	cancel()
	if err := <-left; err == nil {
		t.Fatal("the request was answered while its actor was busy")
	}
	addr, _ := client.Load().(string)
	waitFor(t, 10*time.Second, "the server to close the connection of the client that left", func() bool { return n.closed.has(addr) })
}

// Hibernation drops the instance (in-memory state restarts) and keeps the
// data; on-init runs once per module version, not once per instance.
func TestHibernationAndOnInit(t *testing.T) {
	dir := t.TempDir()
	opts := node.Options{DataDir: dir, Classes: map[string]string{"probe": probe(t)}, IdleTimeout: 200 * time.Millisecond}
	n := startNode(t, opts)
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "2")
	n.expect("POST", "/actor/probe/a/exec", "CREATE TABLE kept (v)", 200, "ok 0")
	n.expect("POST", "/actor/probe/a/exec", "INSERT INTO kept VALUES ('x')", 200, "ok 1")
	waitFor(t, 10*time.Second, "the idle actor to hibernate", func() bool { return n.metric("wasmkeep_actors_resident") == 0 })
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("POST", "/actor/probe/a/query", "SELECT v FROM kept", 200, "ok x")
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "1")
	n.stop()

	// The same module after a restart: no new on-init.
	n = startNode(t, opts)
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "1")
	n.stop()

	// A new version of the module: on-init runs again.
	opts.Classes = map[string]string{"probe": buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "-X main.version=v2")}
	n = startNode(t, opts)
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "2")
	n.expect("POST", "/actor/probe/a/query", "SELECT group_concat(version) FROM init_runs", 200, "ok v1,v2")
}

func TestFailedOnInitIsRetriedWithTheNextEvent(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{
		"probe": buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "-X main.failFirstInit=yes"),
	}})
	n.expect("GET", "/actor/probe/a/init-runs", "", 500, "actor error: first on-init fails on purpose\n")
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "2")
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "2")
}

func TestCapacity(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, MaxInstances: 2, AllowOutbound: loopback})
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("GET", "/actor/probe/b/hits", "", 200, "1")
	// Both idle: the least recently used (a) hibernates to make room for c.
	n.expect("GET", "/actor/probe/c/hits", "", 200, "1")
	n.expect("GET", "/actor/probe/b/hits", "", 200, "2")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1") // a woke afresh; c made room

	// Both resident actors busy: a third gets 503 with Retry-After.
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.do("POST", "/actor/probe/"+name+"/fetch?url="+url.QueryEscape(srv.URL), "")
		}()
		awaitHeld(t, arrived)
	}
	code, body, hdr := n.doH("GET", "/actor/probe/z/hits", "", nil)
	close(release)
	wg.Wait()
	if code != 503 || hdr.Get("Retry-After") != "1" {
		t.Fatalf("at capacity: %d %q %v", code, body, hdr)
	}
}

func TestCPUBudgetStopsALoop(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		n.expect("GET", "/actor/probe/loop/spin", "", 500, "actor exceeded its CPU budget\n")
	}()
	// Other actors keep answering meanwhile.
	for i := 0; i < 5; i++ {
		n.expect("GET", fmt.Sprintf("/actor/probe/other%d/hits", i), "", 200, "1")
	}
	<-done
	t.Logf("loop stopped after %v", time.Since(start))
	// The looping actor gets a fresh instance with the same database.
	n.expect("GET", "/actor/probe/loop/hits", "", 200, "1")
}

func TestWallClockLimit(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, WallClock: 300 * time.Millisecond})
	n.expect("POST", "/actor/probe/a/seen?seq=1&ms=2000", "", 500, "actor exceeded its wall-clock limit\n")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
}

func TestMemoryCap(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, MemoryLimit: 64 << 20})
	n.expect("GET", "/actor/probe/a/alloc?mb=8", "", 200, fmt.Sprint(8<<20))
	n.expect("GET", "/actor/probe/a/alloc?mb=200", "", 500, "actor failed\n")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
}

func TestTrapRollsBackTheOpenTransaction(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	for _, path := range []string{"/trap-in-tx", "/fail-in-tx", "/deadlock"} {
		if code, _ := n.do("POST", "/actor/probe/a"+path, ""); code != 500 {
			t.Errorf("%s: %d, want 500", path, code)
		}
		n.expect("POST", "/actor/probe/a/query", "SELECT count(*) FROM t", 200, "ok 0")
	}
}

func TestSQLSandbox(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	n.expect("POST", "/actor/probe/a/exec", "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)", 200, "ok 0")
	refused := map[string]string{
		"ATTACH DATABASE 'x.db' AS x":              "not-allowed",
		"DETACH DATABASE main":                     "not-allowed",
		"VACUUM":                                   "not-allowed",
		"PRAGMA journal_mode=DELETE":               "not-allowed",
		"PRAGMA writable_schema=ON":                "not-allowed",
		"CREATE TEMP TABLE tt (v)":                 "not-allowed",
		"CREATE TEMP VIEW tv AS SELECT 1":          "not-allowed",
		"SELECT load_extension('x')":               "not-allowed",
		"CREATE VIRTUAL TABLE v USING dbstat":      "not-allowed",
		"SELECT * FROM _wasmkeep_meta":             "not-allowed",
		"INSERT INTO t (v) VALUES ('a'); SELECT 1": "multiple-statements",
		"SELEC 1":                         "syntax",
		"SELECT * FROM missing":           "syntax",
		"INSERT INTO t (v) VALUES (NULL)": "constraint",
		"INSERT INTO t (id, v) VALUES (1, 'a'), (1, 'b')": "constraint",
		"INSERT INTO t (v) VALUES (?)":                    "bind",
	}
	for sql, kind := range refused {
		code, body := n.do("POST", "/actor/probe/a/exec", sql)
		if code != 200 || !strings.HasPrefix(body, "error "+kind+":") {
			t.Errorf("%s: got %d %q, want kind %s", sql, code, body, kind)
		}
	}
	allowed := []string{
		"CREATE VIRTUAL TABLE docs USING fts5(body)",
		"PRAGMA user_version=3",
		"CREATE INDEX t_v ON t (v)",
	}
	for _, sql := range allowed {
		if code, body := n.do("POST", "/actor/probe/a/exec", sql); code != 200 || !strings.HasPrefix(body, "ok") {
			t.Errorf("%s: got %d %q, want ok", sql, code, body)
		}
	}
	n.expect("POST", "/actor/probe/a/exec-durable", "INSERT INTO t (v) VALUES ('durable')", 200, "ok 1")
	if _, body := n.do("POST", "/actor/probe/a/exec-durable", "BEGIN"); !strings.HasPrefix(body, "error not-allowed:") {
		t.Errorf("exec-durable BEGIN: %q, want not-allowed", body)
	}
}

// The book's first tutorial, transcript and restart included.
func TestVisitsTutorial(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"visits": buildGuest(t, "examples/visits", "")}}
	n := startNode(t, opts)
	n.expect("GET", "/actor/visits/home?who=alice", "", 200, "hello alice, you are visitor number 1\n")
	n.expect("GET", "/actor/visits/home?who=bob", "", 200, "hello bob, you are visitor number 2\n")
	n.expect("GET", "/actor/visits/about?who=carol", "", 200, "hello carol, you are visitor number 1\n")
	n.stop()
	n = startNode(t, opts)
	n.expect("GET", "/actor/visits/home?who=dave", "", 200, "hello dave, you are visitor number 3\n")
}

// What a guest prints reaches the node's log, a line per entry, with the
// actor's address and the stream, control characters escaped.
func TestGuestOutputReachesTheLog(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	n.expect("GET", "/actor/probe/a/log", "", 200, "logged")
	log := n.log.String()
	for _, want := range []string{
		`msg="line one" actor=default/probe/a stream=stdout`,
		`msg="to stderr \\u{1b}[31mred" actor=default/probe/a stream=stderr`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

// A guest's package initialisation (_initialize) may call the host, under
// the event's limits.
func TestHostCallsDuringInitialize(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{
		"probe": buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "-X main.sqlInInit=yes"),
	}})
	n.expect("POST", "/actor/probe/a/query", "SELECT count(*) FROM from_init", 200, "ok 0")
}
