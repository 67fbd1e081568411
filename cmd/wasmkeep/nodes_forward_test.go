package main

import (
	"net/http"
	"strings"
	"testing"
)

// Requests forwarded between real nodes get the answer they would get from
// the holder directly (issue 15, item 2).
func TestForwardedRequests(t *testing.T) {
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
