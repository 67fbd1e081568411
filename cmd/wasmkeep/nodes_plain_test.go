package main

import (
	"net/http"
	"testing"

	"github.com/coder/websocket"
)

// A cluster in --cluster-plaintext accept mode (book: Encryption between
// nodes; issue 15, items 2, 4 and 5): a and b have no cluster listener and
// reach each other in plain HTTP at their advertised addresses, calls
// signed; c has a listener and reaches them the same way. Forwarded
// requests, signed calls (their caller believed) and relayed WebSockets
// all work; a client's caller is not believed. (That a and b cannot reach
// c's actors, since c publishes a TLS address and they have no
// certificate, is ADR 1028's rule; it is logged here, not asserted.)
func TestPlainNodes(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	plain := []string{"WASMKEEP_CLUSTER__CLUSTER_LISTEN="}
	a, b := newBucketNode(t, bucketURL, plain), newBucketNode(t, bucketURL, plain)
	c := newBucketNode(t, bucketURL, nil)
	for id, n := range map[string]*bucketNode{"a": a, "b": b, "c": c} {
		n.args = []string{"--actor", "probe=" + probe(t), "--actor", "room=" + room(t), "--bucket", bucketURL, "--node-id", id, "--cluster-plaintext", "accept"}
	}
	a.start()
	b.start()
	c.start()
	logs := func() string {
		return "\na:\n" + a.logs.String() + "\nb:\n" + b.logs.String() + "\nc:\n" + c.logs.String()
	}
	check := func(what string, got reply, node, body string) {
		t.Helper()
		if got.code != 200 || got.node != node || got.body != body {
			t.Fatalf("%s: %+v, want %q from %s%s", what, got, body, node, logs())
		}
	}
	check("p1 on a", ask(t, "POST", a.url+"/actor/probe/p1/hits"), "a", "1")
	check("p1 through b", ask(t, "POST", b.url+"/actor/probe/p1/hits"), "a", "2")
	check("p1 through c", ask(t, "POST", c.url+"/actor/probe/p1/hits"), "a", "3")
	check("p3 on c", ask(t, "POST", c.url+"/actor/probe/p3/hits"), "c", "1")
	t.Logf("p3, held by c (TLS), through a (plain): %+v", ask(t, "POST", a.url+"/actor/probe/p3/hits"))
	check("b's probe calling p1 on a", ask(t, "POST", b.url+"/actor/probe/p2/call?to=probe/p1&path=/caller"), "b", `200 ["default/probe/p2"]`)
	check("c's probe calling p1 on a", ask(t, "POST", c.url+"/actor/probe/p4/call?to=probe/p1&path=/caller"), "c", `200 ["default/probe/p4"]`)
	req, _ := http.NewRequest("POST", b.url+"/actor/probe/p1/caller", nil)
	req.Header.Set("X-Wasmkeep-Caller", "default/probe/p9")
	check("a client's caller through b", send(t, req, nil), "a", "[]")

	onA := dialNode(t, a, "/actor/room/r1/")
	readText(t, onA)
	viaB := dialNode(t, b, "/actor/room/r1/")
	if got := readText(t, viaB); got != "welcome 2" {
		t.Fatalf("relayed through b in plain text: %q", got)
	}
	viaC := dialNode(t, c, "/actor/room/r1/")
	if got := readText(t, viaC); got != "welcome 3" {
		t.Fatalf("relayed through c in plain text: %q", got)
	}
	chat(t, map[string]*websocket.Conn{"a": onA, "b": viaB, "c": viaC})
	a.stop()
	b.stop()
	c.stop()
}
