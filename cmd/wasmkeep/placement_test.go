package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// fakePlacement answers Here but for the actors moved elsewhere or made
// unplaceable, and records what it was asked.
type fakePlacement struct {
	mu    sync.Mutex
	asked map[string]int             // class/name: times asked
	away  map[string]placement.Owner // class/name: held by another node
	fail  map[string]error           // class/name: owner not known
}

func newFakePlacement() *fakePlacement {
	return &fakePlacement{asked: map[string]int{}, away: map[string]placement.Owner{}, fail: map[string]error{}}
}

func (f *fakePlacement) Place(_ context.Context, a abi.Address) (placement.Owner, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := a.Class + "/" + a.Name
	f.asked[k]++
	if err := f.fail[k]; err != nil {
		return placement.Owner{}, err
	}
	if o, ok := f.away[k]; ok {
		return o, nil
	}
	return placement.Here, nil
}

func (f *fakePlacement) move(k string, o placement.Owner) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o == placement.Here {
		delete(f.away, k)
	} else {
		f.away[k] = o
	}
}

func (f *fakePlacement) count(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[k]
}

var n2 = placement.Owner{Node: "n2", Addr: "127.0.0.2:7070"}

// untouched fails the test if class/name has a database on n, or if n has
// other than resident actors in memory (the node's clock is manual: no
// actor hibernates while the test does not move it).
func untouched(t *testing.T, n *testNode, class, name string, resident float64) {
	t.Helper()
	if got := n.metric("wasmkeep_actors_resident"); got != resident {
		t.Errorf("%v actors resident after %s/%s was refused, want %v", got, class, name, resident)
	}
	ok, err := n.storage.Exists(context.Background(), n.dataDir, abi.Address{Tenant: "default", Class: class, Name: name})
	if err != nil || ok {
		t.Errorf("%s/%s has a database here: %v %v", class, name, ok, err)
	}
}

// The front door asks the placement once per request, before the access
// rule and before anything of the actor here; another node's actor gets a
// 503 naming that node, an owner not known a 503 to retry.
func TestPlacementHTTP(t *testing.T) {
	p := newFakePlacement()
	n, _ := newManualNode(t, node.Options{Placement: p})
	n.expect("GET", "/actor/probe/near/hits", "", 200, "1")
	if c := p.count("probe/near"); c != 1 {
		t.Errorf("placement asked %d times for one request, want 1", c)
	}

	p.move("probe/far", n2)
	code, body, h := n.doH("GET", "/actor/probe/far/hits", "", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "held by node n2") || h.Get("Retry-After") != "1" {
		t.Errorf("an actor held by n2: %d %q Retry-After %q, want 503 naming n2, Retry-After 1", code, body, h.Get("Retry-After"))
	}
	untouched(t, n, "probe", "far", 1)

	p.mu.Lock()
	p.fail["probe/lost"] = errors.New("the ownership record did not answer")
	p.mu.Unlock()
	code, body, h = n.doH("POST", "/actor/probe/lost/exec", "CREATE TABLE t (x)", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "owner is not known") || h.Get("Retry-After") != "1" {
		t.Errorf("an owner not known: %d %q Retry-After %q, want 503, Retry-After 1", code, body, h.Get("Retry-After"))
	}
	untouched(t, n, "probe", "lost", 1)

	// A class only existing actors of which are reached: the placement
	// answers before this node's storage is asked whether the actor exists.
	ne, _ := newManualNode(t, node.Options{Placement: p, Access: map[string]access.Access{"probe": mustAccess(t, "existing")}})
	code, body = ne.do("GET", "/actor/probe/far/hits", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "node n2") {
		t.Errorf("an actor held by n2, existing-only class: %d %q, want 503 naming n2", code, body)
	}
}

// An actors.call to an actor another node holds fails with a call-error
// naming the node; the callee does not run here.
func TestPlacementCall(t *testing.T) {
	p := newFakePlacement()
	n, _ := newManualNode(t, node.Options{Placement: p})
	p.move("probe/far", n2)
	code, body := n.do("GET", "/actor/probe/near/call?to=probe/far&path=/hits", "")
	if code != 200 || !strings.HasPrefix(body, "call-error") || !strings.Contains(body, "node n2") {
		t.Errorf("call to an actor held by n2: %d %q, want a call-error naming n2", code, body)
	}
	if c := p.count("probe/far"); c != 1 {
		t.Errorf("placement asked %d times for the callee, want 1", c)
	}
	untouched(t, n, "probe", "far", 1) // the caller only
}

// A due alarm of an actor another node now holds is asked about, then
// left to the holder: it leaves this node's timer (it is not asked about
// again, though an alarm due later fires) and on-alarm does not run here.
func TestPlacementAlarm(t *testing.T) {
	p := newFakePlacement()
	n, m := newManualNode(t, node.Options{Placement: p})
	n.expect("GET", "/actor/probe/b/alarm-set?in=3600000", "", 200, "set")
	p.move("probe/b", n2)
	before := p.count("probe/b")
	m.Advance(time.Hour + time.Second)
	waitFor(t, time.Minute, "the due alarm to be left to n2", func() bool {
		return strings.Contains(n.log.String(), "alarm left to the actor's holder")
	})
	if c := p.count("probe/b"); c != before+1 {
		t.Fatalf("placement asked %d times for the due alarm, want 1", c-before)
	}
	// The node's timer delivers in the order of due times: an alarm kept
	// for a retry (at most seconds ahead) would be asked about again before
	// c's, an hour ahead, fires.
	n.expect("GET", "/actor/probe/c/alarm-set?in=7200000", "", 200, "set") // the wall clock is an hour behind
	m.Advance(2 * time.Hour)
	waitFor(t, time.Minute, "the alarm of c", func() bool { return attempts(n, "c") == 1 })
	if c := p.count("probe/b"); c != before+1 {
		t.Errorf("placement asked %d times for b's alarm, want 1: it stayed on this node's timer", c-before)
	}
	p.move("probe/b", placement.Here)
	if got := attempts(n, "b"); got != 0 {
		t.Errorf("on-alarm ran %d times here for an actor held by n2", got)
	}
}

// A WebSocket upgrade for an actor another node holds gets the 503 naming
// it; a socket open here whose actor moves is closed with 1012 at its next
// message, which does not run here, and no on-websocket-close runs.
func TestPlacementWebSocket(t *testing.T) {
	p := newFakePlacement()
	n, _ := newManualNode(t, node.Options{Placement: p})
	ws := "ws" + strings.TrimPrefix(n.url, "http")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p.move("room/far", n2)
	_, resp, err := websocket.Dial(ctx, ws+"/actor/room/far/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("upgrade for an actor held by n2: %v %v, want 503", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "node n2") {
		t.Errorf("upgrade refused with %q, want it to name n2", body)
	}
	untouched(t, n, "room", "far", 0)

	c := dial(t, n, "/actor/room/near/")
	if msg := readText(t, c); msg != "welcome 1" {
		t.Fatalf("first message %q, want welcome 1", msg)
	}
	p.move("room/near", n2)
	write(t, c, "hello")
	_, msg, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("after the actor moved: %q %v, want a close with 1012", msg, err)
	}
	waitFor(t, time.Minute, "the socket to be released", func() bool { return n.metric("wasmkeep_websockets_open") == 0 })
	if got := n.metric(`wasmkeep_websocket_owner_closes_total{reason="event"}`); got != 1 {
		t.Errorf("owner closes at a message: %v, want 1", got)
	}
	p.move("room/near", placement.Here)
	n.expect("GET", "/actor/room/near/", "", 200, "") // no on-websocket-close ran here
}

// A room that hibernated with a socket open here and was then taken by
// another node has that socket closed with 1012 at the node's owner sweep,
// though its client only listens (book, Running a cluster: WebSockets).
func TestPlacementOwnerSweep(t *testing.T) {
	p := newFakePlacement()
	n, m := newManualNode(t, node.Options{Placement: p, WebSocketPingAfter: time.Hour})
	c := dial(t, n, "/actor/room/quiet/")
	if msg := readText(t, c); msg != "welcome 1" {
		t.Fatalf("first message %q, want welcome 1", msg)
	}
	settle(t, m)
	m.Advance(35 * time.Second)
	waitFor(t, time.Minute, "the room to hibernate", func() bool { return n.metric("wasmkeep_actors_resident") == 0 })
	p.move("room/quiet", n2)
	settle(t, m)
	m.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, msg, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("a listening socket of a room taken elsewhere: %q %v, want a close with 1012", msg, err)
	}
	if got := n.metric(`wasmkeep_websocket_owner_closes_total{reason="sweep"}`); got != 1 {
		t.Errorf("owner closes by the sweep: %v, want 1", got)
	}
}
