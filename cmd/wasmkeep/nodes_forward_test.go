package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Requests forwarded between real nodes get the answer they would get from
// the holder directly (issue 15, item 2).
func TestForwardedRequests(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b := newPeerNode(t, bucketURL, nil, "a"), newPeerNode(t, bucketURL, nil, "b")
	a.start()
	b.start()
	if got := ask(t, "POST", a.url+"/actor/probe/x/hits"); got.node != "a" {
		t.Fatalf("probe/x: %+v, want it held by a", got)
	}
	post := func(u, body string, h http.Header) reply {
		t.Helper()
		req, _ := http.NewRequest("POST", u, strings.NewReader(body))
		for k, vs := range h {
			req.Header[k] = vs
		}
		return send(t, req, []byte(body))
	}

	// A client's Expect: 100-continue: b answers the 100 itself and
	// forwards the body; the client gets a's answer.
	expect := http.Header{"Expect": {"100-continue"}}
	if got := post(b.url+"/actor/probe/x/echo", "hello", expect); got.code != 200 || got.body != "POST /echo? 5" || got.node != "a" {
		t.Fatalf("a request with Expect: 100-continue, through b: %+v, want a's echo\na:\n%s\nb:\n%s", got, a.logs, b.logs)
	}

	// A body declared over the 16 MB cap: 413, through b as on a, not a
	// 503 asking the client to retry what can never succeed.
	big := strings.Repeat("z", 16<<20+1)
	for id, n := range map[string]*bucketNode{"a": a, "b": b} {
		if got := post(n.url+"/actor/probe/x/echo", big, nil); got.code != 413 || got.node != id {
			t.Fatalf("a body over the cap, on %s: %d %q from %q, want 413 from it", id, got.code, got.body, got.node)
		}
	}
	if got := post(b.url+"/actor/probe/x/echo", "after", nil); got.code != 200 || got.body != "POST /echo? 5" {
		t.Fatalf("the next request through b: %+v", got)
	}
	a.stop()
	b.stop()
}

// A node that forwards an actor's requests reads the actor's ownership
// record about once a second, not once a request (owner hints, issue 26,
// item 6): 200 requests through b cost a few bucket GETs on b, where a
// read per request costs at least 200. Once the holder stops cleanly, the
// hint that named it costs no 503: the request reads the record and takes
// the actor where it landed, at once.
func TestForwardingFollowsTheOwnerHint(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b")
	b.args = append(b.args, "--metrics-listen", "127.0.0.1:0")
	a.start()
	b.start()
	if got := ask(t, "POST", a.url+"/actor/probe/x/hits"); got.code != 200 || got.node != "a" {
		t.Fatalf("probe/x: %+v, want it held by a", got)
	}
	metrics := "http://" + metricsAddr(t, b.logs) + "/metrics"
	count := func() (gets, forwards float64) {
		t.Helper()
		page := ask(t, "GET", metrics).body
		for _, status := range []string{"ok", "not_found", "precondition", "error"} {
			gets += max(0, metricValue(page, `wasmkeep_bucket_requests_total{operation="get",status="`+status+`"}`))
		}
		return gets, max(0, metricValue(page, `wasmkeep_forwards_total{kind="request"}`))
	}

	const requests = 200
	gets0, forwards0 := count()
	start := time.Now()
	for i := range requests {
		if got := ask(t, "POST", b.url+"/actor/probe/x/hits"); got.code != 200 || got.node != "a" {
			t.Fatalf("request %d through b: %+v, want a's answer\na:\n%s\nb:\n%s", i, got, a.logs, b.logs)
		}
	}
	elapsed := time.Since(start)
	gets1, forwards1 := count()
	gets, forwards := gets1-gets0, forwards1-forwards0
	// At most one record read a second, and the heartbeat listing's lease
	// reads (two nodes every 1.3 s with steadyLease), with room to spare.
	allowed := 10 + 4*elapsed.Seconds()
	t.Logf("%d requests through b in %v: %v bucket GETs on b, %v forwarded (%.3f GETs per forwarded request)", requests, elapsed, gets, forwards, gets/forwards)
	if forwards != requests {
		t.Errorf("b forwarded %v requests, want %d", forwards, requests)
	}
	if gets > allowed {
		t.Errorf("b made %v bucket GETs for %d forwarded requests in %v, want at most %.0f: the record is read for each request", gets, requests, elapsed, allowed)
	}

	// a's clean stop: b's hint, learned less than a second ago, still names
	// a, live in b's view until its next listing. The forward finds no
	// one to connect to; the hint is dropped and the record, which a
	// released, has b take the actor at once.
	a.stop()
	if got := ask(t, "POST", b.url+"/actor/probe/x/hits"); got.code != 200 || got.node != "b" {
		t.Fatalf("the first request through b after a stopped: %+v, want b to take the actor at once\nb:\n%s", got, b.logs)
	}
	b.stop()
}
