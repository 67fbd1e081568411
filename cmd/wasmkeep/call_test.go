package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// call asks actor from to call to at path, and returns what it answered.
func call(n *testNode, from, to, path string, extra string) string {
	n.t.Helper()
	_, body := n.do("POST", "/actor/probe/"+from+"/call?to="+url.QueryEscape(to)+"&path="+url.QueryEscape(path)+extra, "")
	return body
}

func TestActorCalls(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t), "counter": counter(t)}})

	// The callee sees who calls, as the host says: the caller's forged header is dropped.
	if got := call(n, "room 1", "probe/b", "/caller", ""); got != `200 ["default/probe/room%201"]` {
		t.Errorf("caller header: %s", got)
	}
	if got := call(n, "a", "counter/c", "/", ""); got != "200 1\n" {
		t.Errorf("call to another class: %q", got)
	}
	// A name holding / travels percent-encoded.
	if got := call(n, "a", "probe/x%2Fy", "/self", ""); got != "call-error invalid-address: actor name \"x/y\" contains /" {
		t.Errorf("slash in a name: %q", got)
	}
	for to, want := range map[string]string{
		"nope/x":   "call-error invalid-address: no class nope is served",
		"probe":    "call-error invalid-address: the address must be class/name",
		"probe/..": "call-error invalid-address: actor name \"..\" is not allowed",
		"probe/a":  "call-error reentrant:",
	} {
		if got := call(n, "a", to, "/hits", ""); !strings.HasPrefix(got, want) {
			t.Errorf("call to %s: %q, want %s", to, got, want)
		}
	}
	// A calls B, which calls A back: refused, not deadlocked.
	inner := "/call?to=probe%2Fa&path=%2Fhits"
	if got := call(n, "a", "probe/b", inner, ""); !strings.HasPrefix(got, "200 call-error reentrant:") {
		t.Errorf("A -> B -> A: %q", got)
	}
	// A callee that traps fails the call, not the caller.
	if got := call(n, "a", "probe/t", "/deadlock", ""); got != "call-error failed: actor failed" {
		t.Errorf("trapping callee: %q", got)
	}
}

func TestActorCallLimits(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, MaxBodyBytes: 1 << 20, WallClock: 500 * time.Millisecond})
	if got := call(n, "a", "probe/b", "/echo", "&bytes=1048577"); !strings.HasPrefix(got, "call-error too-large:") {
		t.Errorf("oversize request: %.80q", got)
	}
	if got := call(n, "a", "probe/b", "/echo", "&bytes=1048576"); got != "200 POST /echo? 1048576" {
		t.Errorf("request at the limit: %.80q", got)
	}
	if got := call(n, "a", "probe/b", "/seen?seq=1&ms=2000", ""); !strings.HasPrefix(got, "call-error timeout:") {
		t.Errorf("slow callee: %q", got)
	}
}
