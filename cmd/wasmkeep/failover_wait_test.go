package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// failoverLease gives a dead node's actors a few seconds between its
// leaving the others' view (3.1 s after its last write) and their
// release (8 s), so what the wait does in between shows: the default
// wait is then 8 s + 1.67 s + 1 s + 1 s, 12 s.
var failoverLease = []string{"WASMKEEP_CLUSTER__TTL=3s", "WASMKEEP_CLUSTER__SAFETY=1s", "WASMKEEP_CLUSTER__GRACE=5s"}

// timedReply is an answer and how long it took, or the client's error.
type timedReply struct {
	reply
	retryAfter string
	took       time.Duration
	err        error
}

func timedAsk(ctx context.Context, method, u string) timedReply {
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, method, u, nil)
	resp, err := durabilityClient.Do(req)
	if err != nil {
		return timedReply{took: time.Since(start), err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return timedReply{reply: reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)},
		retryAfter: resp.Header.Get("Retry-After"), took: time.Since(start)}
}

// timedDial opens a WebSocket at u: the 101 (code, node) and the first
// message (body), or the client's error.
func timedDial(ctx context.Context, u string) timedReply {
	start := time.Now()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http"), nil)
	if err != nil {
		return timedReply{took: time.Since(start), err: err}
	}
	defer conn.CloseNow()
	r := timedReply{reply: reply{code: resp.StatusCode, node: resp.Header.Get(peers.NodeHeader)}, took: time.Since(start)}
	read, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, b, err := conn.Read(read)
	r.body, r.err = string(b), err
	return r
}

// The failover wait (issue 26, item 5; book, "When a node dies: what a
// caller sees"). Four nodes; probe/p1 and p2 are held by a, which is
// SIGKILLed. While a is still in b's view, the POST that finds its death
// out gets the 503 "did not answer", and a GET for p2 that follows is
// kept (a connection to a failed) and gets one slow 200. Once a left the
// others' view, at the same moment:
//   - a GET through b (the default wait) gets one slow 200 from the node
//     that took p1 over, not a 503, and an upgrade for the room r1, also
//     held by a, one 101 from the node that took r1;
//   - a POST through b gets the 503 at once, before that 200;
//   - a GET through b whose client gives up after 1 s is never run;
//   - a GET through c (--failover-wait-secs 1) gets the 503 after 1 s;
//   - the control: a GET through d (--failover-wait-secs 0) gets the 503
//     at once, as every request did before the wait.
//
// Each GET inserts its token (probe's /token), so p1's tokens at the end
// say which ran: the first write on a and the kept GET, nothing else.
// Timings are checked only as orders and generous bounds.
func TestFailoverWait(t *testing.T) {
	engineNeutral(t)
	t.Parallel() // its own processes, bucket and ports; it waits on leases
	bucketURL := "file://" + memDir(t)
	a, b, c, d := newPeerNode(t, bucketURL, failoverLease, "a"), newPeerNode(t, bucketURL, failoverLease, "b"),
		newPeerNode(t, bucketURL, failoverLease, "c"), newPeerNode(t, bucketURL, failoverLease, "d")
	// Flags go first: the cluster's logs name each node by its last one,
	// its --node-id.
	for n, flags := range map[*bucketNode][]string{
		a: nil,
		b: {"--metrics-listen", "127.0.0.1:0"},
		c: {"--failover-wait-secs", "1", "--metrics-listen", "127.0.0.1:0"},
		d: {"--failover-wait-secs", "0"},
	} {
		n.args = append(append(flags, "--actor", "room="+room(t)), n.args...)
	}
	cl := &killCluster{nodes: []*bucketNode{a, b, c, d}, urls: make([]string, 4)}
	cl.startAll(t)
	const p1, p2 = "/actor/probe/p1", "/actor/probe/p2"
	for _, p := range []string{p1, p2} {
		if r := ask(t, "GET", a.url+p+"/token?t=first"); r.code != 200 || r.node != "a" {
			t.Fatalf("the first write on a: %+v", r)
		}
	}
	if got := readText(t, dialNode(t, a, "/actor/room/r1/")); got != "welcome 1" {
		t.Fatalf("the room r1 on a: %q", got)
	}
	page := func(n *bucketNode) string {
		r := ask(t, "GET", "http://"+metricsAddr(t, n.logs)+"/metrics")
		return r.body
	}
	a.kill()
	ctx := context.Background()

	// While a is still in a node's view, a request for p1 is sent to a and
	// refused at its connection: the request that finds the death out gets
	// the 503 "did not answer". The GETs that follow for a's actors are
	// kept from then on, though a is still in the view: one for p2 gets the
	// slow 200 too. (Only if the first POST was that one: a may have left
	// b's view already.)
	early := make(chan timedReply, 1)
	if r := ask(t, "POST", b.url+p1+"/token?t=probe"); r.code == 503 && strings.Contains(r.body, "did not answer") {
		go func() { early <- timedAsk(ctx, "GET", b.url+p2+"/token?t=early") }()
	} else {
		t.Logf("the first POST through b after the kill: %+v; no early GET", r)
		close(early)
	}

	// A POST, never kept, says when a left a node's view: the 503 "not
	// reachable".
	gone := func(n *bucketNode) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r := ask(t, "POST", n.url+p1+"/token?t=probe")
			if r.code == 503 && strings.Contains(r.body, peers.MsgUnreachable) {
				return
			}
			if r.code != 503 || time.Now().After(deadline) {
				t.Fatalf("a POST through %s before a left its view: %+v\n%s", n.id(), r, cl.lines("p1", "fence", "took over"))
			}
		}
	}
	gone(b)
	gone(c)
	gone(d)

	leaving, leave := context.WithTimeout(ctx, time.Second)
	defer leave()
	replies := make(chan timedReply, 5)
	go func() { replies <- timedAsk(ctx, "GET", b.url+p1+"/token?t=kept") }()
	upgraded := make(chan timedReply, 1)
	go func() { upgraded <- timedDial(ctx, b.url+"/actor/room/r1/") }()
	post := timedAsk(ctx, "POST", b.url+p1+"/token?t=post")
	left := timedAsk(leaving, "GET", b.url+p1+"/token?t=left")
	expired := timedAsk(ctx, "GET", c.url+p1+"/token?t=expired")
	off := timedAsk(ctx, "GET", d.url+p1+"/token?t=off")
	kept, upgrade := <-replies, <-upgraded
	earlyGET, sent := <-early
	t.Logf("early GET: %d from %q after %v", earlyGET.code, earlyGET.node, earlyGET.took.Round(time.Millisecond))
	t.Logf("kept GET through b: %d from %q after %v; kept upgrade: %d from %q after %v; POST %v, expired %v, off %v",
		kept.code, kept.node, kept.took.Round(time.Millisecond), upgrade.code, upgrade.node, upgrade.took.Round(time.Millisecond),
		post.took, expired.took, off.took)

	if kept.err != nil || kept.code != 200 || kept.node == "a" || kept.node == "" {
		t.Errorf("the kept GET through b: %+v, want one 200 from the node that took p1 over\n%s", kept, cl.lines("p1", "fence", "took over"))
	}
	if upgrade.err != nil || upgrade.code != http.StatusSwitchingProtocols || upgrade.node == "a" || upgrade.node == "" || !strings.HasPrefix(upgrade.body, "welcome") {
		t.Errorf("the kept upgrade through b: %+v, want one 101 from the node that took r1 over", upgrade)
	}
	if sent && (earlyGET.err != nil || earlyGET.code != 200 || earlyGET.node == "a" || earlyGET.node == "") {
		t.Errorf("the GET for p2 through b after a's refused connection: %+v, want one 200 from the node that took p2 over", earlyGET)
	}
	if post.code != 503 || post.retryAfter != "1" || post.took > 5*time.Second || post.took >= kept.took {
		t.Errorf("the POST through b: %+v, want the 503 at once", post)
	}
	if left.err == nil {
		t.Errorf("the GET whose client gave up after 1 s was answered: %+v", left)
	}
	if expired.code != 503 || !strings.Contains(expired.body, peers.MsgUnreachable) || expired.retryAfter != "1" ||
		expired.took < 900*time.Millisecond || expired.took > 10*time.Second {
		t.Errorf("the GET through c, a wait of 1 s: %+v, want the 503 after about 1 s", expired)
	}
	if off.code != 503 || !strings.Contains(off.body, peers.MsgUnreachable) || off.took > 5*time.Second {
		t.Errorf("the control, a GET through d with no wait: %+v, want the 503 at once", off)
	}

	r := ask(t, "GET", b.url+p1+"/tokens")
	if got := strings.Fields(r.body); r.code != 200 || !slices.Equal(got, []string{"first", "kept"}) {
		t.Errorf("p1's tokens: %+v, want first and kept only: the kept GET ran once, no other request ran", r)
	}
	if r := ask(t, "GET", b.url+p2+"/tokens"); sent && (r.code != 200 || !slices.Equal(strings.Fields(r.body), []string{"first", "early"})) {
		t.Errorf("p2's tokens: %+v, want first and early", r)
	}
	waits := func(n *bucketNode, kind, outcome string) float64 {
		return max(0, metricValue(page(n), `wasmkeep_failover_waits_total{kind="`+kind+`",outcome="`+outcome+`"}`))
	}
	for kind, want := range map[string]float64{"request": 1, "websocket": 1} {
		if kind == "request" && sent {
			want++ // the early GET
		}
		if got := waits(b, kind, "served") + waits(b, kind, "forwarded"); got != want {
			t.Errorf("b counted %v kept %ss served or forwarded, want %v", got, kind, want)
		}
	}
	if got := waits(b, "request", "left"); got != 1 {
		t.Errorf("b counted %v kept GETs whose client left, want 1", got)
	}
	if got := waits(c, "request", "expired"); got != 1 {
		t.Errorf("c counted %v expired waits, want 1", got)
	}
	if t.Failed() {
		t.Log(cl.logs())
	}
}
