package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// The failover wait (book, "When a node dies: what a caller sees"; ADR
// 1049): an outside GET or HEAD without a body, or a WebSocket upgrade,
// for an actor whose holder is suspected gone is kept until the actor can
// be placed again, instead of a 503 at once. The front door's placement
// loop (ServeHTTP) is the only place that keeps one; what follows is its
// parts.

// NoFailoverWait is Options.FailoverWait turned off (--failover-wait-secs 0).
const NoFailoverWait time.Duration = -1

// DefaultMaxConnections is Options.MaxConnections at 0 (node.max_connections).
const DefaultMaxConnections = 10000

// keptPerActor caps the requests kept at once for one actor.
const keptPerActor = 64

// FailoverWaitFor is the default failover wait for lease settings s: the
// takeover (ttl + grace), the watch before a fence, one heartbeat period
// for a node that learns of another's fence at its next listing, and a
// second over which the kept requests are spread; in whole seconds,
// rounded up (25 s with the defaults).
func FailoverWaitFor(s nodelease.Settings) time.Duration {
	d := s.Takeover() + s.Watch() + s.Period() + time.Second
	return (d + time.Second - 1) / time.Second * time.Second
}

// keepable reports whether r may be kept: from outside (neither forwarded
// by a node nor signed), and either a WebSocket upgrade or a GET or HEAD
// with no body. Anything with a body is never kept, so no write runs late
// for a caller that gave up.
func keepable(r *http.Request) bool {
	if r.Header.Get(peers.ForwardedHeader) != "" || r.Header.Get(callsign.SignatureHeader) != "" {
		return false
	}
	if websocket.IsUpgrade(r) {
		return true
	}
	noBody := r.ContentLength == 0 && (r.Body == nil || r.Body == http.NoBody)
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && noBody
}

// suspected returns the record of an event's holder that kept it from
// running here while its node is not live and its actors not free yet
// (openDatabase's "the actor's node is not reachable").
func suspected(err error) (ownership.Record, bool) {
	var held *ownership.HeldError
	if errors.As(err, &held) {
		return held.Record, true
	}
	return ownership.Record{}, false
}

// keeping counts the requests kept at once, on the node and by actor.
type keeping struct {
	mu    sync.Mutex
	max   int // a quarter of the node's connection limit
	total int
	by    map[string]int
}

func newKeeping(connections int) *keeping {
	return &keeping{max: connections / 4, by: map[string]int{}}
}

// take takes a place for a request for the actor key, unless the node or
// the actor has its share kept already.
func (k *keeping) take(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.total >= k.max || k.by[key] >= keptPerActor {
		return false
	}
	k.total++
	k.by[key]++
	return true
}

// done gives back a place take gave.
func (k *keeping) done(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.total--
	if k.by[key]--; k.by[key] == 0 {
		delete(k.by, key)
	}
}

// unreachable is the second reason to keep a request: a peer still live
// in the view to which this node could not open a connection. It is
// suspected from that failure until this node's view shows a lease write
// of it more than twice the allowed clock skew later (it is alive: sent to
// as usual), and then not again for a horizon (10 s), so a lasting fault
// costs one 503 per horizon, not a wait per request.
type unreachable struct {
	mu      sync.Mutex
	since   map[string]time.Time // by node: the failed connection
	cleared map[string]time.Time // by node: when it proved alive
}

func newUnreachable() *unreachable {
	return &unreachable{since: map[string]time.Time{}, cleared: map[string]time.Time{}}
}

// failed records that no connection to node could be opened at now.
func (u *unreachable) failed(node string, now time.Time, s nodelease.Settings) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c, ok := u.cleared[node]; ok && now.Sub(c) < s.Horizon() {
		return
	}
	delete(u.cleared, node)
	if _, ok := u.since[node]; !ok {
		u.since[node] = now
	}
}

// suspected reports whether node is suspected at now, with peer its lease
// as this node's view has it: a live write dated after the failure by more
// than twice the skew clears it.
func (u *unreachable) suspected(node string, peer membership.Peer, now time.Time, s nodelease.Settings) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	since, ok := u.since[node]
	if !ok {
		return false
	}
	if peer.Err == nil && peer.Object.State == nodelease.Live && peer.Object.WrittenAt.After(since.Add(2*s.MaxSkew)) {
		delete(u.since, node)
		u.cleared[node] = now
		return false
	}
	return true
}

// keepFrom reports whether a request placed on peer, a live node, is kept
// instead of sent: peer is suspected unreachable, and k keeps it.
func (n *Node) keepFrom(k *kept, peer string) bool {
	if k == nil {
		return false
	}
	m := n.opts.Cluster.Member
	p, _ := m.View.Live(peer)
	return n.unreachable.suspected(peer, p, n.clock.Now(), m.Lease.Settings()) && k.hold(ownership.Record{Node: peer})
}

// tried is how one try of the front door's placement loop answered.
type tried struct {
	sentTo string // the node it was forwarded to; "" when answered here
	ran    bool   // answered here by the actor (its response, or the 101)
}

// waitOutcome is how a kept request's wait ended once a try answered it,
// with holder the node suspected.
func waitOutcome(holder string, t tried) string {
	switch {
	case t.sentTo == holder:
		return metrics.WaitOwnerAlive
	case t.sentTo != "":
		return metrics.WaitForwarded
	case t.ran:
		return metrics.WaitServed
	}
	return metrics.WaitAnsweredOther
}

// kept is one request's failover wait: nil for a request that is never
// kept.
type kept struct {
	n      *Node
	kind   string // metrics.ForwardRequest or ForwardWebSocket
	key    string // the actor's
	holder ownership.Record
	until  time.Time // zero until it holds a place
	ended  bool      // counted: it was over the caps, or its wait ended
}

// keepFor returns r's wait, or nil when r is never kept: the wait off, a
// node alone, or a request keepable does not take.
func (n *Node) keepFor(r *http.Request, key string) *kept {
	if n.opts.Cluster == nil || n.opts.FailoverWait <= 0 || !keepable(r) {
		return nil
	}
	kind := metrics.ForwardRequest
	if websocket.IsUpgrade(r) {
		kind = metrics.ForwardWebSocket
	}
	return &kept{n: n, kind: kind, key: key}
}

// hold reports whether the request is kept now that a try found its
// actor's holder suspected (the try answers it otherwise: the 503 at
// once). Its first hold takes a place, or counts it over_cap.
func (k *kept) hold(holder ownership.Record) bool {
	if k == nil || k.ended {
		return false
	}
	if k.until.IsZero() {
		if !k.n.keeping.take(k.key) {
			k.end(metrics.WaitOverCap)
			return false
		}
		k.until = k.n.clock.Now().Add(k.n.opts.FailoverWait)
	}
	k.holder = holder
	return true
}

// end counts how the wait ended and gives its place back.
func (k *kept) end(outcome string) {
	if k == nil || k.ended {
		return
	}
	k.ended = true
	k.n.opts.Cluster.Metrics.FailoverWait(k.kind, outcome)
	if outcome != metrics.WaitOverCap {
		k.n.keeping.done(k.key)
	}
}

// answered ends a held wait with how the try t answered it.
func (k *kept) answered(t tried) {
	if k != nil && !k.until.IsZero() {
		k.end(waitOutcome(k.holder.Node, t))
	}
}

// wait waits until placement is worth asking again, about once a second
// (the first time at a random point in the second, so the requests kept
// for a node's actors do not ask together), and returns "", or ends the
// wait and returns how (tick decides).
func (k *kept) wait(ctx context.Context) string {
	n, m := k.n, k.n.opts.Cluster.Member
	d := rand.N(time.Second) + 1
	for {
		t := n.clock.NewTimer(max(0, min(d, k.until.Sub(n.clock.Now()))))
		select {
		case <-ctx.Done():
			t.Stop()
			return k.stop(metrics.WaitLeft)
		case <-n.leaving:
			t.Stop()
			return k.stop(metrics.WaitShutdown)
		case <-t.C():
		}
		d = time.Second
		peer, err := m.View.Live(k.holder.Node)
		switch v := tick(n.clock.Now(), k.until, m.Lease.Valid(), k.holder, peer, err == nil, m.Lease.Settings()); v {
		case askAgain:
			return ""
		case "":
		default:
			return k.stop(v)
		}
	}
}

// askAgain is tick's word for placing a kept request again.
const askAgain = "ask"

// tick decides, at one of a kept request's ticks at now, whether it ends
// (lease_lost, expired), is placed again (askAgain: the holder, as this
// node's view has it, is live, in its process or a new one, or its lease
// frees the actor), or waits on (""). While the holder's heartbeat is
// only stale nothing is asked: no bucket request is made for it.
func tick(now, until time.Time, leaseValid bool, holder ownership.Record, peer membership.Peer, live bool, s nodelease.Settings) string {
	switch {
	case !leaseValid:
		return metrics.WaitLeaseLost
	case !now.Before(until):
		return metrics.WaitExpired
	case live || peer.ID != "" && peer.Err == nil && peer.Object.Frees(holder.Instance, now, s):
		return askAgain
	}
	return ""
}

func (k *kept) stop(outcome string) string {
	k.end(outcome)
	return outcome
}

// refuseKept answers a kept request whose wait ended unserved: never run.
func refuseKept(w http.ResponseWriter, outcome string) {
	if outcome == metrics.WaitLeft {
		return
	}
	w.Header().Set("Retry-After", "1")
	http.Error(w, peers.MsgUnreachable, http.StatusServiceUnavailable)
}
