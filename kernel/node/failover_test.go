package node

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
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
	if got, ok := suspected(unavailable("the actor's node is not reachable; retry", &ownership.HeldError{Record: rec})); !ok || got != rec {
		t.Errorf("suspected(held by a) = %+v, %v", got, ok)
	}
	for _, err := range []error{nil, unavailable("the node cannot take the actor now, retry", ownership.ErrLeaseInvalid), errors.New("other")} {
		if _, ok := suspected(err); ok {
			t.Errorf("suspected(%v) = true", err)
		}
	}
}
