package placement

import (
	"context"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
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
// On a node that takes no actor (NotTaking true: a drain, its secrets
// that cannot be opened; ADR 1051) what would be left here goes to the
// live peer of the app that takes actors chosen by rendezvous hashing of
// the actor's key (Takers, Rendezvous), never kept as a hint since that
// peer holds nothing yet; with none, ErrNoTaker.
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
	// NotTaking reports whether this node takes no actor now; nil: it
	// always takes them.
	NotTaking func() bool
}

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
	if o.NotTaking != nil && o.NotTaking() {
		return o.taker(key)
	}
	return Here, nil
}

// taker is where an actor no live node holds goes from a node that takes
// none.
func (o Owned) taker(key ownership.Actor) (Owner, error) {
	p, ok := Rendezvous(key.Tenant+"/"+key.Class+"/"+key.Name, Takers(o.View, o.App))
	if !ok {
		return Here, ErrNoTaker
	}
	return Owner{Node: p.ID, Addr: p.Object.Info.Advertise}, nil
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
