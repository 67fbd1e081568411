package placement

import (
	"errors"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// ErrNoTaker is the placement of an actor no node holds, asked on a node
// that takes no actor, when no live peer of its app takes actors either:
// the event is refused with 503 and Retry-After.
var ErrNoTaker = errors.New("this node takes no actor now and no other node of the app does")

// Takers are the live peers in view that serve app, follow its current
// version (a peer behind may lack the actor's class) and take actors
// (heartbeat line 12 written by none: nodelease.Takes), by id.
func Takers(view *membership.View, app string) []membership.Peer {
	var out []membership.Peer
	for _, p := range view.Peers() {
		info := p.Object.Info
		if _, err := view.Live(p.ID); err == nil && info.App == app && info.Behind == "" && info.Taking == nodelease.Takes {
			out = append(out, p)
		}
	}
	return out
}

// Rendezvous is the peer among peers whose share key is by rendezvous
// hashing (alarmindex.Shard, which shares the alarm sweep too): every
// node that asks with the same peers picks the same one, and the actors
// spread over them evenly with no load figure. False with no peer.
func Rendezvous(key string, peers []membership.Peer) (membership.Peer, bool) {
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	id := alarmindex.Shard(key, ids)
	for _, p := range peers {
		if p.ID == id {
			return p, true
		}
	}
	return membership.Peer{}, false
}

// TakeTarget is the peer a node that takes no actor asks to take actor
// (the take call, book ADR 0017; ADR 1052): among the Takers of app whose
// heartbeat names the call (nodelease.CapabilityTake), the one whose
// share the actor is; false with none.
func TakeTarget(view *membership.View, app string, actor ownership.Actor) (membership.Peer, bool) {
	var peers []membership.Peer
	for _, p := range Takers(view, app) {
		if p.Object.Info.HasCapability(nodelease.CapabilityTake) {
			peers = append(peers, p)
		}
	}
	return Rendezvous(shareKey(actor), peers)
}

// shareKey is what an actor's taker is chosen by.
func shareKey(a ownership.Actor) string { return a.Tenant + "/" + a.Class + "/" + a.Name }
