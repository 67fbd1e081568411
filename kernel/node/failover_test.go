package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
)

// The default wait is the book's: ttl + grace (15 s), the watch before a
// fence (about 5.7 s), a heartbeat period (3 s) and a second, rounded up
// to 25 s; it follows other lease timings.
func TestFailoverWaitFor(t *testing.T) {
	if got := FailoverWaitFor(nodelease.DefaultSettings()); got != 25*time.Second {
		t.Errorf("FailoverWaitFor(defaults) = %v, want 25s", got)
	}
	s := nodelease.Settings{TTL: 3 * time.Second, Grace: time.Second, Safety: time.Second, HeartbeatPeriod: time.Second}
	// 4 s + (1 s + 2/3 s) + 1 s + 1 s = 7.67 s: 8 s.
	if got := FailoverWaitFor(s); got != 8*time.Second {
		t.Errorf("FailoverWaitFor(%+v) = %v, want 8s", s, got)
	}
}

// Only an outside GET or HEAD without a body, or an upgrade, is kept.
func TestKeepable(t *testing.T) {
	req := func(method, body string, header ...string) *http.Request {
		var r *http.Request
		if body == "" {
			r = httptest.NewRequest(method, "/actor/c/a/", nil)
		} else {
			r = httptest.NewRequest(method, "/actor/c/a/", strings.NewReader(body))
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	chunked := req(http.MethodGet, "x")
	chunked.ContentLength = -1
	upgrade := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	for name, c := range map[string]struct {
		r    *http.Request
		want bool
	}{
		"GET":                {req(http.MethodGet, ""), true},
		"HEAD":               {req(http.MethodHead, ""), true},
		"upgrade":            {req(http.MethodGet, "", upgrade...), true},
		"POST":               {req(http.MethodPost, ""), false},
		"DELETE":             {req(http.MethodDelete, ""), false},
		"GET with a body":    {req(http.MethodGet, "x"), false},
		"GET chunked":        {chunked, false},
		"forwarded GET":      {req(http.MethodGet, "", peers.ForwardedHeader, "b"), false},
		"forwarded upgrade":  {req(http.MethodGet, "", append(upgrade, peers.ForwardedHeader, "b")...), false},
		"signed GET (call)":  {req(http.MethodGet, "", callsign.SignatureHeader, "sig"), false},
		"signed upgrade too": {req(http.MethodGet, "", append(upgrade, callsign.SignatureHeader, "sig")...), false},
	} {
		if got := keepable(c.r); got != c.want {
			t.Errorf("%s: keepable = %v, want %v", name, got, c.want)
		}
	}
}

// A quarter of the connection limit on the node, 64 per actor; a place
// given back is taken again; a quarter of zero keeps none.
func TestKeepingCaps(t *testing.T) {
	k := newKeeping(400) // 100 on the node
	for i := range keptPerActor {
		if !k.take("a") {
			t.Fatalf("place %d of actor a refused", i)
		}
	}
	if k.take("a") {
		t.Fatal("a 65th place for one actor taken")
	}
	for i := range 100 - keptPerActor {
		if !k.take(fmt.Sprint("b", i%2)) {
			t.Fatalf("node place %d refused", keptPerActor+i)
		}
	}
	if k.take("c") {
		t.Fatal("a place over a quarter of the connections taken")
	}
	k.done("a")
	if !k.take("c") {
		t.Fatal("a place given back is not taken again")
	}
	k.done("c")
	for range keptPerActor - 1 {
		k.done("a")
	}
	if k.by["a"] != 0 || len(k.by) != 2 {
		t.Errorf("places by actor after giving back a's: %v", k.by)
	}
	if newKeeping(3).take("a") {
		t.Error("a node whose quarter is zero kept a request")
	}
}

// How a wait ended once a try answered it.
func TestWaitOutcome(t *testing.T) {
	for _, c := range []struct {
		t    tried
		want string
	}{
		{tried{sentTo: "a"}, metrics.WaitOwnerAlive},
		{tried{sentTo: "c"}, metrics.WaitForwarded},
		{tried{ran: true}, metrics.WaitServed},
		{tried{}, metrics.WaitAnsweredOther},
	} {
		if got := waitOutcome("a", c.t); got != c.want {
			t.Errorf("waitOutcome(a, %+v) = %s, want %s", c.t, got, c.want)
		}
	}
}

// Only a holder's HeldError, which openDatabase wraps for a holder not
// live, makes a request keepable; other failures do not.
func TestSuspected(t *testing.T) {
	rec := ownership.Record{Node: "a", Instance: "i", Generation: 3}
	if got, ok := suspected(unavailable(peers.MsgUnreachable, &ownership.HeldError{Record: rec})); !ok || got != rec {
		t.Errorf("suspected(held by a) = %+v, %v", got, ok)
	}
	for _, err := range []error{nil, unavailable("the node cannot take the actor now, retry", ownership.ErrLeaseInvalid), errors.New("other")} {
		if _, ok := suspected(err); ok {
			t.Errorf("suspected(%v) = true", err)
		}
	}
}

// At each tick a kept request ends when this node's lease is not valid or
// the wait ran out, is placed again once the holder is live or its lease
// frees the actor, and otherwise waits on without asking anything.
func TestTick(t *testing.T) {
	s := nodelease.DefaultSettings()
	at := time.Unix(1000, 0) // the holder's last lease write
	until := at.Add(40 * time.Second)
	holder := ownership.Record{Node: "a", Instance: "i", Generation: 1}
	stale := membership.Peer{ID: "a", Object: nodelease.Object{State: nodelease.Live, Instance: "i", WrittenAt: at}}
	fenced := membership.Peer{ID: "a", Object: nodelease.Object{State: nodelease.Fenced, Instance: "i", WrittenAt: at}}
	unreadable := fenced
	unreadable.Err = errors.New("not a node lease")
	for _, c := range []struct {
		name  string
		now   time.Time
		valid bool
		peer  membership.Peer
		live  bool
		want  string
	}{
		{"stale heartbeat", at.Add(12 * time.Second), true, stale, false, ""},
		{"stale long after", at.Add(30 * time.Second), true, stale, false, ""},
		{"gone from the view", at.Add(30 * time.Second), true, membership.Peer{}, false, ""},
		{"fenced, not free yet", at.Add(15*time.Second - 1), true, fenced, false, ""},
		{"fenced and free", at.Add(15 * time.Second), true, fenced, false, askAgain},
		{"unreadable lease", at.Add(20 * time.Second), true, unreadable, false, ""},
		{"alive again", at.Add(12 * time.Second), true, stale, true, askAgain},
		{"restarted", at.Add(12 * time.Second), true, membership.Peer{ID: "a", Object: nodelease.Object{State: nodelease.Live, Instance: "j", WrittenAt: at.Add(11 * time.Second)}}, false, askAgain},
		{"expired", until, true, fenced, false, metrics.WaitExpired},
		{"own lease not valid", at.Add(20 * time.Second), false, fenced, true, metrics.WaitLeaseLost},
	} {
		if got := tick(c.now, until, c.valid, holder, c.peer, c.live, s); got != c.want {
			t.Errorf("%s: tick = %q, want %q", c.name, got, c.want)
		}
	}
}

// A request kept over the caps is answered at once (hold false) and
// holds no place, even at a later try; an ended wait gives its place
// back; with the wait off nothing is kept.
func TestKeptHoldsAPlace(t *testing.T) {
	n := &Node{opts: Options{FailoverWait: time.Second, Cluster: &Cluster{Metrics: metrics.NewCluster()}},
		clock: clock.NewManual(time.Unix(0, 0)), keeping: newKeeping(4)} // one place
	get := httptest.NewRequest(http.MethodGet, "/actor/c/x/", nil)
	holder := ownership.Record{Node: "a", Instance: "i"}
	first, second := n.keepFor(get, "x"), n.keepFor(get, "y")
	if !first.hold(holder) {
		t.Fatal("the first kept request was not kept")
	}
	if !first.hold(holder) {
		t.Fatal("the first kept request was not kept at its second try")
	}
	if second.hold(holder) {
		t.Fatal("a request over the node's quarter was kept")
	}
	first.answered(tried{ran: true})
	if n.keeping.total != 0 || second.hold(holder) {
		t.Fatalf("after the first ended: %d places taken; the one over the caps kept at a later try", n.keeping.total)
	}
	if !n.keepFor(get, "y").hold(holder) {
		t.Error("a place given back was not taken again")
	}
	n.opts.FailoverWait = NoFailoverWait
	if n.keepFor(get, "z") != nil {
		t.Error("a request kept with the wait off")
	}
	if n.keepFor(httptest.NewRequest(http.MethodPost, "/actor/c/x/", nil), "x") != nil {
		t.Error("a POST kept")
	}
}

// A kept request's wait ends at once, its place given back, when its
// client leaves (never answered) or the node begins to stop.
func TestKeptWaitEnds(t *testing.T) {
	n := &Node{opts: Options{FailoverWait: time.Minute, Cluster: &Cluster{Metrics: metrics.NewCluster()}},
		clock: clock.NewManual(time.Unix(0, 0)), keeping: newKeeping(40), leaving: make(chan struct{})}
	get := httptest.NewRequest(http.MethodGet, "/actor/c/x/", nil)
	holder := ownership.Record{Node: "a", Instance: "i"}

	k := n.keepFor(get, "x")
	k.hold(holder)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := k.wait(ctx); got != metrics.WaitLeft {
		t.Errorf("the client left: the wait ended %q", got)
	}
	w := httptest.NewRecorder()
	refuseKept(w, metrics.WaitLeft)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("a request whose client left was answered: %d %q", w.Code, w.Body)
	}

	k = n.keepFor(get, "x")
	k.hold(holder)
	n.beginStop()
	if got := k.wait(context.Background()); got != metrics.WaitShutdown {
		t.Errorf("the node began to stop: the wait ended %q", got)
	}
	w = httptest.NewRecorder()
	refuseKept(w, metrics.WaitShutdown)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), peers.MsgUnreachable) {
		t.Errorf("the 503 of a wait that ended: %d %q %q", w.Code, w.Header(), w.Body)
	}
	if n.keeping.total != 0 {
		t.Errorf("%d places still taken", n.keeping.total)
	}
}

// A live peer this node could not connect to is suspected until a lease
// write of it more than twice the skew after the failure shows, then not
// again for a horizon.
func TestUnreachable(t *testing.T) {
	s := nodelease.DefaultSettings() // skew 1 s, horizon 10 s
	at := time.Unix(1000, 0)         // the failed connection
	u := newUnreachable()
	lease := func(written time.Duration) membership.Peer {
		return membership.Peer{ID: "a", Object: nodelease.Object{State: nodelease.Live, Instance: "i", WrittenAt: at.Add(written)}}
	}
	if u.suspected("a", lease(0), at, s) {
		t.Fatal("a peer suspected before any failure")
	}
	u.failed("a", at, s)
	u.failed("a", at.Add(time.Second), s) // the first failure counts
	if !u.suspected("a", lease(-time.Second), at.Add(time.Second), s) || !u.suspected("a", lease(2*time.Second), at.Add(3*time.Second), s) {
		t.Fatal("not suspected with no write more than 2 s after the failure")
	}
	if u.suspected("b", lease(0), at, s) {
		t.Fatal("another peer suspected")
	}
	if u.suspected("a", lease(2*time.Second+time.Millisecond), at.Add(4*time.Second), s) {
		t.Fatal("still suspected after a write 2 s after the failure")
	}
	u.failed("a", at.Add(13*time.Second), s) // within 10 s of proving alive
	if u.suspected("a", lease(2*time.Second+time.Millisecond), at.Add(13*time.Second), s) {
		t.Fatal("suspected again within the horizon")
	}
	u.failed("a", at.Add(14*time.Second), s)
	if !u.suspected("a", lease(12*time.Second), at.Add(14*time.Second), s) {
		t.Fatal("not suspected after a failure past the horizon")
	}
	fenced := lease(30 * time.Second)
	fenced.Object.State = nodelease.Fenced
	if !u.suspected("a", fenced, at.Add(31*time.Second), s) {
		t.Error("a fenced lease cleared the suspicion")
	}
}
