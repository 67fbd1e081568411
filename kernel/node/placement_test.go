package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// fakePlacement answers Here but for the actors moved elsewhere or made
// unplaceable, and records what it was asked.
type fakePlacement struct {
	mu    sync.Mutex
	asked map[string]int   // class/name: times asked
	away  map[string]Owner // class/name: held by another node
	fail  map[string]error // class/name: owner not known
}

func newFakePlacement() *fakePlacement {
	return &fakePlacement{asked: map[string]int{}, away: map[string]Owner{}, fail: map[string]error{}}
}

func (f *fakePlacement) Place(_ context.Context, a abi.Address) (Owner, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := a.Class + "/" + a.Name
	f.asked[k]++
	if err := f.fail[k]; err != nil {
		return Owner{}, err
	}
	if o, ok := f.away[k]; ok {
		return o, nil
	}
	return Here, nil
}

func (f *fakePlacement) move(k string, o Owner) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o == Here {
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

var n2 = Owner{Node: "n2", Addr: "127.0.0.2:7070"}

// untouched fails the test if class/name runs here or has a database.
func untouched(t *testing.T, n *Node, class, name string) {
	t.Helper()
	if resident(n, class, name) {
		t.Errorf("%s/%s is resident here", class, name)
	}
	if n.hasDatabase(abi.Address{Tenant: n.opts.Tenant, Class: class, Name: name}) {
		t.Errorf("%s/%s has a database here", class, name)
	}
}

// The front door asks the placement once per request, before the access
// rule and before anything of the actor here; another node's actor gets a
// 503 naming that node, an owner not known a 503 to retry.
func TestPlacementHTTP(t *testing.T) {
	p := newFakePlacement()
	n := newTestNode(t, Options{Placement: p})
	expect(t, n, "GET", "/actor/probe/near/hits", "", 200, "1")
	if c := p.count("probe/near"); c != 1 {
		t.Errorf("placement asked %d times for one request, want 1", c)
	}

	p.move("probe/far", n2)
	code, body, h := do(t, n, "GET", "/actor/probe/far/hits", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "node n2 (127.0.0.2:7070)") || h.Get("Retry-After") != "1" {
		t.Errorf("an actor held by n2: %d %q Retry-After %q, want 503 naming n2, Retry-After 1", code, body, h.Get("Retry-After"))
	}
	untouched(t, n, "probe", "far")

	p.fail["probe/lost"] = errors.New("the ownership record did not answer")
	code, body, h = do(t, n, "POST", "/actor/probe/lost/exec", "CREATE TABLE t (x)")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "owner is not known") || h.Get("Retry-After") != "1" {
		t.Errorf("an owner not known: %d %q Retry-After %q, want 503, Retry-After 1", code, body, h.Get("Retry-After"))
	}
	untouched(t, n, "probe", "lost")

	// A class only existing actors of which are reached: the placement
	// answers before this node's storage is asked whether the actor exists.
	ne := newTestNode(t, Options{Placement: p, Access: map[string]Access{"probe": {Mode: Existing}}})
	code, body, _ = do(t, ne, "GET", "/actor/probe/far/hits", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "node n2") {
		t.Errorf("an actor held by n2, existing-only class: %d %q, want 503 naming n2", code, body)
	}
}

// An actors.call to an actor another node holds fails with a call-error
// naming the node; the callee does not run here.
func TestPlacementCall(t *testing.T) {
	p := newFakePlacement()
	n := newTestNode(t, Options{Placement: p})
	p.move("probe/far", n2)
	code, body, _ := do(t, n, "GET", "/actor/probe/near/call?to=probe/far&path=/hits", "")
	if code != 200 || !strings.HasPrefix(body, "call-error") || !strings.Contains(body, "node n2") {
		t.Errorf("call to an actor held by n2: %d %q, want a call-error naming n2", code, body)
	}
	if c := p.count("probe/far"); c != 1 {
		t.Errorf("placement asked %d times for the callee, want 1", c)
	}
	untouched(t, n, "probe", "far")
}

// A due alarm of an actor another node now holds is asked about, then
// left to the holder: it leaves this node's timer and on-alarm does not run
// here.
func TestPlacementAlarm(t *testing.T) {
	p := newFakePlacement()
	n, m := newManualNode(t, Options{Placement: p})
	expect(t, n, "GET", "/actor/probe/b/alarm-set?in=3600000", "", 200, "set")
	p.move("probe/b", n2)
	before := p.count("probe/b")
	m.Advance(time.Hour + time.Second)
	waitFor(t, "the due alarm to be placed", func() bool { return p.count("probe/b") > before })
	n.alarms.mu.Lock()
	left := len(n.alarms.byKey)
	n.alarms.mu.Unlock()
	if left != 0 {
		t.Errorf("%d alarms left on this node's timer, want 0", left)
	}
	p.move("probe/b", Here)
	if got := attempts(t, n, "b"); got != 0 {
		t.Errorf("on-alarm ran %d times here for an actor held by n2", got)
	}
}

// A WebSocket upgrade for an actor another node holds gets the 503 naming
// it; a socket open here whose actor moves is closed with 1012 at its next
// message, which does not run here, and no on-websocket-close runs.
func TestPlacementWebSocket(t *testing.T) {
	p := newFakePlacement()
	n := newTestNode(t, Options{Placement: p})
	srv := httptest.NewServer(n)
	defer srv.Close()
	ws := "ws" + strings.TrimPrefix(srv.URL, "http")
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
	untouched(t, n, "room", "far")

	c, _, err := websocket.Dial(ctx, ws+"/actor/room/near/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "welcome 1" {
		t.Fatalf("first message %q %v, want welcome 1", msg, err)
	}
	p.move("room/near", n2)
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("after the actor moved: %q %v, want a close with 1012", msg, err)
	}
	waitFor(t, "the socket to be released", func() bool {
		n.ws.mu.Lock()
		defer n.ws.mu.Unlock()
		return len(n.ws.all) == 0
	})
	p.move("room/near", Here)
	expect(t, n, "GET", "/actor/room/near/", "", 200, "") // no on-websocket-close ran here
}
