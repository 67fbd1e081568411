package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// newPeerNode is node id of the cluster on bucketURL: the counter and
// probe classes, a cluster listener of its own (shortLease); not started.
func newPeerNode(t *testing.T, bucketURL string, env []string, id string) *bucketNode {
	n := newBucketNode(t, bucketURL, env)
	n.args = []string{"--actor", "counter=" + counter(t), "--actor", "probe=" + probe(t), "--bucket", bucketURL, "--node-id", id}
	return n
}

// startNodes starts the nodes at once (each start waits for its lease
// check and compiles its classes) and stops the test if one did not start.
func startNodes(t *testing.T, nodes ...*bucketNode) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(n.start)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// reply is one answer of a node.
type reply struct {
	code int
	body string
	node string // x-wasmkeep-node
}

func ask(t *testing.T, method, u string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)}
}

// Three nodes on one bucket are one cluster: a request through any node
// reaches the same actor, x-wasmkeep-node naming its holder; actors.call
// reaches an actor another node holds, with the caller the host names, and
// a cycle across nodes is refused; a clean stop hands the holder's actors
// to the next node a request reaches, at once.
func threeNodes(t *testing.T, bucketURL string, env []string) {
	a, b, c := newPeerNode(t, bucketURL, env, "a"), newPeerNode(t, bucketURL, env, "b"), newPeerNode(t, bucketURL, env, "c")
	for _, n := range []*bucketNode{a, b, c} {
		n.start()
	}
	counter := func(n *bucketNode, method string) reply { return ask(t, method, n.url+"/actor/counter/shared") }
	want := func(r reply, value int, node, what string) {
		t.Helper()
		if r.code != 200 || r.body != strconv.Itoa(value) || r.node != node {
			t.Fatalf("%s: %d %q from node %q; want %d from node %s\na:\n%s\nb:\n%s\nc:\n%s", what, r.code, r.body, r.node, value, node, a.logs, b.logs, c.logs)
		}
	}
	want(counter(b, "POST"), 1, "b", "the first write, on b")
	want(counter(a, "POST"), 2, "b", "a write through a")
	want(counter(c, "GET"), 2, "b", "a read through c")

	// p1 is held by a, p2 by c; p2 calls p1 through c.
	if r := ask(t, "POST", a.url+"/actor/probe/p1/hits"); r.node != "a" {
		t.Fatalf("p1: %+v", r)
	}
	call := func(path string) reply {
		return ask(t, "POST", c.url+"/actor/probe/p2/call?to=probe/p1&path="+url.QueryEscape(path))
	}
	if r := call("/caller"); r.node != "c" || r.body != `200 ["default/probe/p2"]` {
		t.Fatalf("p2 on c calling p1 on a: %+v, want the caller named by the host only", r)
	}
	if r := call("/call?to=probe/p2&path=/hits"); !strings.HasPrefix(r.body, "200 call-error reentrant") {
		t.Fatalf("p2 calling p1 calling p2 across nodes: %+v, want reentrant", r)
	}

	b.stop()
	want(counter(a, "POST"), 3, "a", "the first write after b stopped, through a")
	want(counter(c, "POST"), 4, "a", "a write through c")

	// A killed holder's actor is taken over by the node a request reaches
	// once the holder is fenced; meanwhile every request gets a 503 to
	// retry, and no acknowledged durable write is lost.
	durable := func(n *bucketNode) reply { return ask(t, "POST", n.url+"/actor/counter/shared/durable") }
	want(durable(c), 5, "a", "a durable write through c")
	a.kill()
	deadline := time.Now().Add(30 * time.Second)
	for r := durable(c); ; r = durable(c) {
		if r.code == 200 {
			want(r, 6, "c", "the first write after a was killed, through c")
			break
		}
		if r.code != 503 || time.Now().After(deadline) {
			t.Fatalf("while a's actor was not taken over: %+v, want 503 until c takes it\n%s", r, c.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.stop()
}

func TestThreeNodes(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	t.Run("bucket-fs", func(t *testing.T) {
		t.Parallel() // its own nodes and bucket, as the other's
		threeNodes(t, "file://"+memDir(t), nil)
	})
	t.Run("bucket-s3", func(t *testing.T) {
		t.Parallel()
		srv := startS3(t)
		threeNodes(t, "s3://"+srv.NewBucket(t), srv.Environ())
	})
}

// A node whose lease lapses (its lease writes held by the bucket's relay)
// closes its WebSockets with 1012 before any other node may take their
// actors; once its writes land again it serves the room again.
func TestLeaseLapseClosesSockets(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	n, relay, bucketName := relayedNode(t)
	n.args = append(n.args, "--actor", "room="+room(t))
	n.start()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(n.url, "http") + "/actor/room/lapse/"
	c, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, n.logs)
	}
	defer c.CloseNow()
	relay.Hold(func(req *http.Request) bool {
		return req.Method == "PUT" && strings.HasPrefix(req.URL.Path, "/"+bucketName+"/nodes/")
	})
	for err == nil { // what the room sends first, then the close
		_, _, err = c.Read(ctx)
	}
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("a socket when the node's lease lapsed: %v, want a 1012 close\n%s", err, n.logs)
	}
	relay.Release()
	waitFor(t, 20*time.Second, "the room again once the lease renewed", func() bool {
		c, _, err := websocket.Dial(ctx, wsURL, nil)
		if err != nil {
			return false
		}
		c.CloseNow()
		return true
	})
}

// A node whose lease lapsed (its lease writes held by its bucket's relay,
// its reads passing) runs no event of an actor it held, even under a load
// of reads that keeps the actor's mailbox from ever emptying there (a
// write would end its stream and give it up): once a peer fenced it, took
// the actor and acknowledged a durable write, no read sent through the
// lapsed node after that lacks the write: it is forwarded to the holder or
// refused with 503, never served from the old copy (issue 24, item 1). The
// peer starts after the lapse, so that it is in no view the lapsed node
// took before it.
func TestLapsedNodeRunsNoEvent(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	srv := startS3(t)
	bucketName := srv.NewBucket(t)
	relay := startRelay(t, srv.Endpoint)
	a := newPeerNode(t, "s3://"+bucketName, append(srv.Environ(), "AWS_ENDPOINT="+relay.URL), "a")
	a.start()
	token := func(n *bucketNode, tok string) reply { return ask(t, "POST", n.url+"/actor/probe/x/token?t="+tok) }
	if r := token(a, "first"); r.code != 200 || r.body != "1" || r.node != "a" {
		t.Fatalf("the first durable write, on a: %+v", r)
	}
	// Through a, from before the lapse to after b's write: slow reads
	// that keep x's mailbox full, and reads of its tokens.
	type read struct {
		sent time.Time
		r    reply
	}
	var (
		mu    sync.Mutex
		reads []read
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	client := func(path string, record bool) {
		defer wg.Done()
		for !stop.Load() {
			sent := time.Now()
			resp, err := http.Get(a.url + "/actor/probe/x" + path)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if record {
				mu.Lock()
				reads = append(reads, read{sent, reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)}})
				mu.Unlock()
			}
			if resp.StatusCode != 200 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	wg.Add(5)
	for range 3 {
		go client("/sleep?ms=150", false)
	}
	for range 2 {
		go client("/tokens", true)
	}
	relay.Hold(func(req *http.Request) bool {
		return req.Method == "PUT" && strings.HasPrefix(req.URL.Path, "/"+bucketName+"/nodes/")
	})
	waitFor(t, 30*time.Second, "a's lease to lapse", func() bool { return strings.Contains(a.logs.String(), "node lease lapsed") })
	b := newPeerNode(t, "s3://"+bucketName, srv.Environ(), "b")
	b.start()
	deadline := time.Now().Add(60 * time.Second)
	r := token(b, "second")
	for ; r.code != 200 || r.node != "b"; r = token(b, "second") {
		if r.code != 503 || time.Now().After(deadline) {
			stop.Store(true)
			t.Fatalf("b taking x from a, fenced: %+v, want 503 until b fenced a\nb:\n%s", r, b.logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	acked := time.Now()
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	after, served := 0, 0
	for _, rd := range reads {
		if !rd.sent.After(acked) {
			continue
		}
		after++
		switch {
		case rd.r.code == 200 && rd.r.body != "first\nsecond":
			t.Fatalf("a read through a sent after b acknowledged the second token: %+v, want both tokens from b, or a 503\na:\n%s", rd.r, a.logs)
		case rd.r.code == 200:
			served++
		case rd.r.code != 503:
			t.Fatalf("a read through a: %+v, want both tokens from b, or a 503", rd.r)
		}
	}
	if after == 0 {
		t.Fatal("no read was sent through a after b's write")
	}
	t.Logf("%d reads through a after b's write: %d forwarded to b, the rest refused with 503", after, served)
}
