package main

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	s3bucket "github.com/wasmkeep/wasmkeep/plugins/bucket-s3"
)

// actorListings picks the listings of actors' histories in a bucket under
// a key prefix (path-style: GET /BUCKET?list-type=2&prefix=PREFIX/state/default/default/actors/...).
func actorListings(bucketName, prefix string) func(*http.Request) bool {
	return func(req *http.Request) bool {
		q := req.URL.Query()
		return req.Method == "GET" && req.URL.Path == "/"+bucketName && q.Get("list-type") == "2" &&
			strings.HasPrefix(q.Get("prefix"), prefix+app.Default.StateRoot()+"actors/")
	}
}

// An actor of an existing class whose history is only in the bucket (its
// node stopped, no node holds it, no disk has it) is reached through a
// node that never had it, and through another node while that one holds
// it (book ADR 0010). An unknown name answers 404 through any node and
// leaves nothing in the bucket, over HTTP and WebSocket, an escaped one
// too, under a key prefix. A listing the bucket does not answer is a 503
// to retry, neither a 404 nor a new actor. A deleted actor still exists,
// its reset being history. (Planted bugs, each caught: existence decided
// from the disk alone answers child 404 through b; a listing that fails
// counted as no answers ghost 404.)
func TestExistingActorOnlyInTheBucket(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	srv := startS3(t)
	name := srv.NewBucket(t)
	relay := startRelay(t, srv.Endpoint)
	rule := []string{"--access", "probe=existing:main"}
	// steadyLease: which node holds child is checked, and a lapse under
	// load (shortLease) would hand it over; lapses are other tests' subject.
	env := append(slices.Clone(steadyLease), srv.Environ()...)
	a := newPeerNode(t, "s3://"+name+"/pre", env, "a")
	b := newPeerNode(t, "s3://"+name+"/pre", append(slices.Clone(env), "AWS_ENDPOINT="+relay.URL), "b")
	for _, n := range []*bucketNode{a, b} {
		n.args = append(rule, n.args...) // the node id stays last
	}
	want := func(n *bucketNode, path string, code int, body, node string) {
		t.Helper()
		r := ask(t, "GET", n.url+path)
		if r.code != code || (body != "" && r.body != body) || (node != "" && r.node != node) {
			t.Fatalf("GET %s through %s: %d %q from %q; want %d %q from %q\na:\n%s\nb:\n%s",
				path, n.id(), r.code, r.body, r.node, code, body, node, a.logs, b.logs)
		}
	}

	a.start()
	// main may be created from outside; it creates child with a call.
	call := "/actor/probe/main/call?to=probe/child&path=" + url.QueryEscape("/token?t=kept")
	if r := ask(t, "POST", a.url+call); r.code != 200 || r.body != "200 1" {
		t.Fatalf("main creating child: %+v\n%s", r, a.logs)
	}
	want(a, "/actor/probe/child/tokens", 200, "kept", "a")
	want(a, "/actor/probe/nobody/tokens", 404, "", "")
	a.stop() // child hibernates: its history is in the bucket, its record free

	b.start()
	want(b, "/actor/probe/child/tokens", 200, "kept", "b")
	want(b, "/actor/probe/nobody/tokens", 404, "", "")
	want(b, "/actor/probe/room%201/tokens", 404, "", "")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.url, "http")+"/actor/probe/nobody/ws", nil); err == nil || resp == nil || resp.StatusCode != 404 {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("a WebSocket to an unknown name through b: %v %v, want 404", resp, err)
	}
	// a again, with child's database on its disk: the holder, b, answers.
	a.start()
	want(a, "/actor/probe/child/tokens", 200, "kept", "b")
	want(a, "/actor/probe/ghost/tokens", 404, "", "")

	// A listing held by the bucket: b gives it up after ReadSilence (5 s).
	relay.Hold(actorListings(name, "pre/"))
	resp, err := http.Get(b.url + "/actor/probe/ghost/tokens")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("ghost through b with the listing held: %d, Retry-After %q; want 503 with Retry-After\n%s",
			resp.StatusCode, resp.Header.Get("Retry-After"), b.logs)
	}
	relay.Release()
	want(b, "/actor/probe/ghost/tokens", 404, "", "")

	// Deleted, child still exists in a cluster (book ADR 0010, 0028): its
	// reset is history like any other, so even the node that deleted it
	// wakes it empty for an outside request.
	if r := ask(t, "POST", a.url+"/actor/probe/child/delete?durable=1"); r.code != 200 || r.node != "b" {
		t.Fatalf("deleting child through a: %+v\n%s", r, b.logs)
	}
	if r := ask(t, "GET", b.url+"/actor/probe/child/tokens"); r.code != 200 || r.body != "" {
		t.Fatalf("a deleted child through b: %+v, want it woken empty\n%s", r, b.logs)
	}

	// Nothing of the unknown names in the bucket: no history, no record.
	bk, err := s3bucket.New(srv.Config(name))
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	keys, err := bucket.ListAll(t.Context(), bk, "")
	if err != nil {
		t.Fatal(err)
	}
	var child bool
	for _, e := range keys {
		if strings.Contains(e.Key, "/nobody") || strings.Contains(e.Key, "/ghost") || strings.Contains(e.Key, "/room") {
			t.Errorf("an unknown name left %s in the bucket", e.Key)
		}
		child = child || strings.HasPrefix(e.Key, "pre/"+app.Default.StateRoot()+"actors/default/probe/child/")
	}
	if !child {
		t.Fatalf("no history of child among the bucket's keys: %d listed", len(keys))
	}
}
