package node

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// Relocation when a node is full (ADR 1054): an outside request or
// upgrade that admission refused because every instance slot here is
// busy goes, rather than a 503, to a live peer of the app that takes
// actors and whose heartbeat says it has room (line 14), when no node
// holds its actor. The peer takes it as it takes any forwarded request:
// placed from the record there and acquired through the one place holds
// are acquired, so the conditional write decides, as ever. Nothing runs
// here first, so a peer that is full after all, or finds the actor taken
// meanwhile, only answers its 503.

// room is how many more actors the node would start now (heartbeat line
// 14): its instance slots not held by a busy instance (a slot an idle
// actor holds is given up to an admission that needs it), none while it
// takes no actor or stops.
func (n *Node) room() int {
	if n.stopping.Load() || n.takesNone() {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	idle := 0
	for _, a := range n.actors {
		if a.evictable() && !a.handingOver.Load() {
			idle++
		}
	}
	return cap(n.slots) - len(n.slots) + idle
}

// relocate sends r, whose delivery of c/name failed with err, once to a
// peer with room, and reports where and whether it answered w: only when
// err is the admission's errCapacity (so the actor is not resident here:
// a resident one's events queue) and r is a client's (one another node
// forwarded would bounce back: that peer is full too). payload is the
// request's event payload, whose body the peer gets, or nil for an
// upgrade. A node alone, or whose placement keeps every actor here,
// relocates nothing; nor is a room parked here relocated (ADR 1055): its
// record names this live node, so the peer would send it back, 503.
func (n *Node) relocate(w http.ResponseWriter, r *http.Request, c *class, name string, err error, payload []byte) (sentTo string, answered bool) {
	cl := n.opts.Cluster
	_, alone := n.opts.Placement.(placement.Local)
	if cl == nil || alone || !errors.Is(err, errCapacity) || r.Header.Get(peers.ForwardedHeader) != "" {
		return "", false
	}
	addr := abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}
	if actor, err := ownerKey(addr); err != nil || cl.Member.Owners.Parked(actor) {
		return "", false
	}
	to, ok := placement.Relocation(cl.Member.View, n.opts.App.String(), n.actorKey(c, name))
	if !ok || payload != nil && !withBody(r, payload) {
		return "", false
	}
	status, f := n.forwardOnce(w, r, &placement.Elsewhere{Addr: addr, Owner: to})
	outcome := metrics.RelocationServed
	switch {
	case f != nil:
		outcome = metrics.RelocationFailed
	case status == http.StatusServiceUnavailable:
		outcome = metrics.RelocationRefused
	}
	cl.Metrics.Relocated(outcome)
	return to.Node, true
}

// withBody gives r the body of the request encoded in payload (r's own
// was read into it), and reports whether payload could be read.
func withBody(r *http.Request, payload []byte) bool {
	req, err := abi.DecodeRequest(payload)
	if err != nil {
		return false
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(req.Body)), int64(len(req.Body))
	return true
}
