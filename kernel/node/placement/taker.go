package placement

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// ErrNoTaker is the placement of an actor no node holds, asked on a node
// that takes no actor, when no live peer of its app takes actors either:
// the event is refused with 503 and Retry-After.
var ErrNoTaker = errors.New("this node takes no actor now and no other node of the app does")

// Takers are the live peers in view that serve app and take actors
// (heartbeat line 12 written by none: nodelease.Takes), by id.
func Takers(view *membership.View, app string) []membership.Peer {
	var out []membership.Peer
	for _, p := range view.Peers() {
		if _, err := view.Live(p.ID); err == nil && p.Object.Info.App == app && p.Object.Info.Taking == nodelease.Takes {
			out = append(out, p)
		}
	}
	return out
}

// Rendezvous is the peer among peers with the highest rendezvous hash of
// (key, peer id): every node that asks with the same peers picks the same
// one, and the actors spread over them evenly with no load figure. False
// with no peer.
func Rendezvous(key string, peers []membership.Peer) (membership.Peer, bool) {
	var best membership.Peer
	var bestScore uint64
	found := false
	for _, p := range peers {
		h := sha256.New()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(p.ID))
		score := binary.BigEndian.Uint64(h.Sum(nil))
		if !found || score > bestScore || score == bestScore && p.ID < best.ID {
			best, bestScore, found = p, score, true
		}
	}
	return best, found
}
