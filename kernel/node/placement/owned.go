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
type Owned struct {
	Records Records
	View    *membership.View
	Self    string
	// Key names an actor in its ownership record.
	Key func(abi.Address) (ownership.Actor, error)
}

func (o Owned) Place(ctx context.Context, addr abi.Address) (Owner, error) {
	key, err := o.Key(addr)
	if err != nil {
		return Here, err
	}
	if _, ok := o.Records.Owns(key); ok {
		return Here, nil
	}
	rec, found, err := o.Records.Owner(ctx, key)
	switch {
	case err != nil:
		return Here, err
	case !found || rec.Nobody() || rec.Node == o.Self:
		return Here, nil
	}
	peer, err := o.View.Live(rec.Node)
	if err != nil || peer.Object.Instance != rec.Instance {
		return Here, nil
	}
	return Owner{Node: rec.Node, Addr: peer.Object.Info.Advertise}, nil
}
