// Package placement is the seam where "is this actor mine, and if not who
// holds it" plugs in (ADR 1021): the Placement a node asks before every
// event, Local (a node alone: every actor runs here), and the errors that
// say an event does not run here.
package placement

import (
	"context"
	"errors"
	"fmt"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
)

// Placement says where an actor runs. The node asks it once for every
// event it would deliver (an HTTP request, a WebSocket upgrade, message or
// close, an actors.call, a due alarm), before the event touches anything
// of the actor here: its mailbox, a resident slot, its database.
//
// A node alone runs every actor itself (Local). A node with a bucket
// answers from the actors' ownership records (Owned): this node holds the
// actor, or nobody does (take it here: Here as well), or another node
// holds it.
type Placement interface {
	// Place answers Here or the node that holds the actor at addr. An error
	// is an owner that cannot be known now: the event is refused with 503
	// and Retry-After (a due alarm is tried again later), never run here.
	Place(ctx context.Context, addr abi.Address) (Owner, error)
}

// Hinted is a Placement that keeps owner hints (Owned). The node tells it
// when one proved wrong (forwarding to the owner failed, or the peer
// answered 503) and when it acquired the actor itself: Forget.
type Hinted interface {
	Placement
	Forget(addr abi.Address)
}

type routedKey struct{}

// Routed marks ctx as a routing question: placing an outside request or
// upgrade that no node forwarded yet, which is only sent on where the
// answer says (or run here if it says Here, after its own hold check). Its
// placement may answer from an owner hint. Every other event (an alarm, a
// call, a forwarded request, a socket's message) is placed from the
// record.
func Routed(ctx context.Context) context.Context {
	return context.WithValue(ctx, routedKey{}, true)
}

func routed(ctx context.Context) bool { return ctx.Value(routedKey{}) != nil }

// Owner is where an actor runs: Here, or another node.
type Owner struct {
	Node string // the node id of the node that holds the actor; "" for this node
	Addr string // where that node takes requests from its peers
	Hint bool   // told by an owner hint, not read from the record now
	// Taker: nobody holds the actor and this node takes none, so it goes
	// to this peer, chosen among those that take actors (Takers), which
	// holds nothing yet.
	Taker bool
	// Successor: nobody holds the actor and a move released it to this
	// peer (ownership.Successor, ADR 1070), which holds nothing yet.
	Successor bool
}

// Here is the Owner that means this node.
var Here = Owner{}

// Local is the placement of a node alone: every actor runs here.
type Local struct{}

func (Local) Place(context.Context, abi.Address) (Owner, error) { return Here, nil }

// Elsewhere is an event for an actor another node holds: not run here. The
// front door forwards a request to the holder, actors.call calls it there,
// and an event that cannot go there is refused with this.
type Elsewhere struct {
	Addr  abi.Address
	Owner Owner
}

func (e *Elsewhere) Error() string {
	how := "is held by"
	if e.Owner.Successor {
		how = "moves to"
	}
	return fmt.Sprintf("actor %s/%s %s node %s; retry", e.Addr.Class, address.EscapeName(e.Addr.Name), how, e.Owner.Node)
}

// Unplaced wraps a Placement's error: the actor's owner is not known now.
type Unplaced struct{ Err error }

func (e *Unplaced) Error() string { return "the actor's owner is not known now: " + e.Err.Error() }
func (e *Unplaced) Unwrap() error { return e.Err }

// Check asks p whether an event for addr runs here: nil if it does, an
// *Elsewhere or *Unplaced if not. A node calls it in one place for every
// event it delivers.
func Check(ctx context.Context, p Placement, addr abi.Address) error {
	owner, err := p.Place(ctx, addr)
	switch {
	case err != nil:
		return &Unplaced{err}
	case owner != Here:
		return &Elsewhere{Addr: addr, Owner: owner}
	}
	return nil
}

// NotHere reports whether err says the event belongs to another node or
// to an owner not known now.
func NotHere(err error) bool {
	var e *Elsewhere
	var u *Unplaced
	return errors.As(err, &e) || errors.As(err, &u)
}
