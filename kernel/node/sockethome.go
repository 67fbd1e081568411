package node

import (
	"context"
	"errors"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// Socket home (ADR 1055, book ADR 0024): a held actor that hibernates from
// its idle drop (the idle timeout or an eviction) with a socket open here
// parks its hold instead of releasing it, so its record keeps naming this
// node: other nodes route its events, upgrades and calls here, where the
// next one wakes it with an ordinary acquisition at a new generation
// (ownership.Owners.Acquire), and its clients stay connected. The parked
// record is released once its last socket here goes (the freed slot, and
// the owner sweep), at each drain pass, at a clean stop; a lapse turns it
// into a pending release, a lost lease drops it.

// park parks the actor's hold h as it hibernates, when the rules allow:
// a socket of the actor is open here and not closing, and the node takes
// actors (not draining, not shut out of its secrets) and is not stopping.
// It reports whether it parked h; if not, the caller releases it.
func (a *actor) park(h ownership.Hold) bool {
	n := a.node
	if !n.ws.Open(a.key) || n.takesNone() || n.stopping.Load() {
		return false
	}
	if !n.opts.Cluster.Member.Owners.Park(h) {
		return false
	}
	// Its last socket may have gone since it was checked, its freed slot
	// finding nothing parked yet: checked again now that it is.
	n.socketFreed(a.key)
	return true
}

// socketFreed releases the parked record of the actor key (tenant/class/
// name) once it has no socket open here: called as a socket's slot is
// freed, and by park. Most actors whose last socket goes have nothing
// parked: their actor's lock, which a wake holds through its bucket
// writes, is not taken for them.
func (n *Node) socketFreed(key string) {
	if n.opts.Cluster == nil || n.ws.Open(key) {
		return
	}
	if actor, err := ownerOfKey(key); err == nil && n.opts.Cluster.Member.Owners.Parked(actor) {
		n.releaseParked(actor, metrics.ParkedLastSocket)
	}
}

// ownerOfKey names the actor key (tenant/class/name) as its ownership
// record does.
func ownerOfKey(key string) (ownership.Actor, error) {
	return ownerKey(addrOfKey(key))
}

// addrOfKey is the address of the actor key (tenant/class/name); the name
// may hold '/'.
func addrOfKey(key string) abi.Address {
	tenant, rest, _ := strings.Cut(key, "/")
	class, name, _ := strings.Cut(rest, "/")
	return abi.Address{Tenant: tenant, Class: class, Name: name}
}

// releaseParked releases the actor's parked record, if it has one, and
// counts it for reason once it landed (one that did not is pending).
func (n *Node) releaseParked(actor ownership.Actor, reason string) {
	n.releaseParkedTo(actor, reason, ownership.Successor{})
}

// releaseParkedTo is releaseParked whose record names next, the node a
// move hands the actor to.
func (n *Node) releaseParkedTo(actor ownership.Actor, reason string, next ownership.Successor) {
	ok, err := n.opts.Cluster.Member.Owners.ReleaseParkedTo(context.WithoutCancel(n.ctx), actor, next)
	switch {
	case ok && err == nil:
		n.opts.Cluster.Metrics.ParkedReleased(reason, 1)
	case err != nil && !errors.Is(err, ownership.ErrReleasePending):
		n.log.Warn("releasing a parked ownership record", "actor", actor.String(), "err", err)
	}
}

// releaseAllParked releases every parked record, counted for reason (a
// drain pass, a clean stop) as they land, starting none once ctx ends.
// Each release is bounded on its own (ownership.ReleaseTimeout), not by
// ctx; those not started stay parked (ownership.Owners.ReleaseAllParked).
func (n *Node) releaseAllParked(ctx context.Context, reason string) {
	if k := n.opts.Cluster.Member.Owners.ReleaseAllParked(ctx); k > 0 {
		n.opts.Cluster.Metrics.ParkedReleased(reason, k)
		n.log.Info("released parked ownership records", "count", k, "reason", reason)
	}
}

// unparkForTaker releases the parked record of the actor at addr before
// it is placed, when this node takes no actor and the placement sends it
// to a peer that does (book ADR 0024): the record names this live node,
// so that peer would send the event back here, refused until the next
// taking pass released it (a secrets block, or a park that landed after
// a drain pass).
func (n *Node) unparkForTaker(addr abi.Address) {
	cl := n.opts.Cluster
	if cl == nil || !n.takesNone() {
		return
	}
	actor, err := ownerKey(addr)
	if err != nil || !cl.Member.Owners.Parked(actor) || placement.KeepsUnheld(n.claiming(), cl.Member.View, n.opts.App.String()) {
		return
	}
	n.releaseParked(actor, metrics.ParkedNotTaking)
}

// sweepParked is the owner sweep's part for parked records: one whose
// actor has no socket open here any more is released, whatever the reason
// its sockets went. It returns the actors (tenant/class/name) whose record
// is parked here with a socket open, which the sweep need not read: their
// record names this node. A node alone parks nothing.
func (n *Node) sweepParked() map[string]bool {
	if n.opts.Cluster == nil {
		return nil
	}
	open := map[ownership.Actor]string{}
	for _, key := range n.ws.Keys() {
		if actor, err := ownerOfKey(key); err == nil {
			open[actor] = key
		}
	}
	parked := map[string]bool{}
	for _, actor := range n.opts.Cluster.Member.Owners.ParkedActors() {
		if key, ok := open[actor]; ok {
			parked[key] = true
		} else {
			n.releaseParked(actor, metrics.ParkedLastSocket)
		}
	}
	return parked
}
