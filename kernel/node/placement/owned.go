package placement

import (
	"context"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// Records is the part of the ownership records Owned reads.
type Records interface {
	// Owns returns this process's hold of a, if it has one.
	Owns(a ownership.Actor) (ownership.Hold, bool)
	// Owner reads a's record (one GET).
	Owner(ctx context.Context, a ownership.Actor) (ownership.Record, bool, error)
}

// Owned is the placement of a node with a bucket (book, Running a
// cluster: How it works). An actor this process holds runs here, with no
// bucket request. For any other, its ownership record decides: a live
// peer that holds it (the process the record names) gets the event; a
// record naming nobody, this node, a node not live in the view, or an
// earlier process of a live node leaves it here, where waking it acquires
// it (restoring it first) if the record is free by then, and refuses it
// while the holder's lease may still be valid.
//
// On a node that claims no actor (Claiming: a drain, its secrets that
// cannot be opened; ADR 1051) what would be left here goes to the live
// peer of the app that takes actors chosen by rendezvous hashing of the
// actor's key (Takers, Rendezvous), never kept as a hint since that peer
// holds nothing yet; with none, it stays here on a draining node
// (ClaimsLast) and is refused with ErrNoTaker on one that must run none
// (ClaimsNone).
//
// A record a move released to a successor (ownership.Successor, ADR
// 1070) sends the actor's events to it, until the record's time, while it
// is the process the record names and a peer that takes actors: there the
// first event claims it. This node claims it only past that.
//
// A record that names a live peer is kept as a hint (Hints, HintTTL), and
// a routing question (Routed: an outside request not forwarded yet) is
// answered from it while its node is still live in the view, with no
// bucket request. Any other event reads the record, so only forwarding
// ever follows a hint, and the holder still checks its own hold.
type Owned struct {
	Records Records
	View    *membership.View
	Self    string
	// Key names an actor in its ownership record.
	Key   func(abi.Address) (ownership.Actor, error)
	Hints *Hints
	// App is the app this node serves (tenant/app): only its peers take
	// its actors.
	App string
	// Claiming is whether this node claims an actor no live peer holds
	// now; nil: it always does (Claims).
	Claiming func() Claiming
	// Clock judges a successor's time.
	Clock clock.Clock
}

// Claiming is whether a node claims (acquires) an actor no live peer
// holds.
type Claiming int

const (
	// Claims: it takes actors.
	Claims Claiming = iota
	// ClaimsLast: it drains. Such an actor goes to a peer that takes
	// actors, and stays here only when there is none (book ADR 0014: a
	// drain must never make an actor unreachable).
	ClaimsLast
	// ClaimsNone: it must run no actor (its secrets cannot be opened).
	// Such an actor goes to a peer that takes actors, or is refused.
	ClaimsNone
)

func (o Owned) Place(ctx context.Context, addr abi.Address) (Owner, error) {
	key, err := o.Key(addr)
	if err != nil {
		return Here, err
	}
	if _, ok := o.Records.Owns(key); ok {
		return Here, nil
	}
	if routed(ctx) {
		if rec, ok := o.Hints.Get(key); ok {
			if owner, live := o.peer(rec); live {
				owner.Hint = true
				return owner, nil
			}
		}
	}
	rec, found, err := o.Records.Owner(ctx, key)
	if err != nil {
		return Here, err
	}
	if found && !rec.Nobody() && rec.Node != o.Self {
		if owner, ok := o.peer(rec); ok {
			o.Hints.Put(key, rec)
			return owner, nil
		}
	}
	o.Hints.Forget(key)
	if found && rec.Nobody() {
		if owner, ok := o.successor(rec.Next); ok {
			return owner, nil
		}
	}
	c := Claims
	if o.Claiming != nil {
		c = o.Claiming()
	}
	if !KeepsUnheld(c, o.View, o.App) {
		return o.taker(key)
	}
	return Here, nil
}

// KeepsUnheld reports whether a node claiming c, serving app, claims an
// actor no live peer holds: it takes actors, or it drains and no live
// peer of app takes actors.
func KeepsUnheld(c Claiming, view *membership.View, app string) bool {
	return c == Claims || c == ClaimsLast && len(Takers(view, app)) == 0
}

// taker is where an actor no live node holds goes from a node that takes
// none.
func (o Owned) taker(key ownership.Actor) (Owner, error) {
	p, ok := Rendezvous(shareKey(key), Takers(o.View, o.App))
	if !ok {
		return Here, ErrNoTaker
	}
	return Owner{Node: p.ID, Addr: p.Object.Info.Advertise, Taker: true}, nil
}

// successor is where a record's successor (next) sends the actor's
// events: to that process while it takes actors, until next.Until; never
// kept as a hint, since it holds nothing yet (and a hint's failure places
// the event again, which would find the successor again).
func (o Owned) successor(next ownership.Successor) (Owner, bool) {
	if next.Node == "" || next.Node == o.Self || !o.Clock.Now().Before(next.Until) {
		return Here, false
	}
	for _, p := range Takers(o.View, o.App) {
		if p.ID == next.Node && p.Object.Instance == next.Instance {
			return Owner{Node: p.ID, Addr: p.Object.Info.Advertise, Successor: true}, true
		}
	}
	return Here, false
}

// peer is the live peer that holds what rec names: its node, in the
// process rec names.
func (o Owned) peer(rec ownership.Record) (Owner, bool) {
	peer, err := o.View.Live(rec.Node)
	if err != nil || peer.Object.Instance != rec.Instance {
		return Here, false
	}
	return Owner{Node: rec.Node, Addr: peer.Object.Info.Advertise}, true
}

// Forget drops the hint of addr's owner: forwarding to it failed or was
// refused, or this node acquired the actor.
func (o Owned) Forget(addr abi.Address) {
	if key, err := o.Key(addr); err == nil {
		o.Hints.Forget(key)
	}
}
