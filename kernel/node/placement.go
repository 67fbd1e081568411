package node

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
// A node alone runs every actor itself (Local). A cluster's placement will
// answer from the actors' ownership records: this node holds the actor, or
// nobody does (take it here: Here as well), or another node holds it.
type Placement interface {
	// Place answers Here or the node that holds the actor at addr. An error
	// is an owner that cannot be known now: the event is refused with 503
	// and Retry-After (a due alarm is tried again later), never run here.
	Place(ctx context.Context, addr abi.Address) (Owner, error)
}

// Owner is where an actor runs: Here, or another node.
type Owner struct {
	Node string // the node id of the node that holds the actor; "" for this node
	Addr string // where that node takes requests from its peers
}

// Here is the Owner that means this node.
var Here = Owner{}

// Local is the placement of a node alone: every actor runs here.
type Local struct{}

func (Local) Place(context.Context, abi.Address) (Owner, error) { return Here, nil }

// errElsewhere is an event for an actor another node holds: not run here
// (forwarding to the holder is not built yet).
type errElsewhere struct {
	addr  abi.Address
	owner Owner
}

func (e *errElsewhere) Error() string {
	return fmt.Sprintf("actor %s/%s is held by node %s (%s); this node does not forward yet: retry at that node",
		e.addr.Class, address.EscapeName(e.addr.Name), e.owner.Node, e.owner.Addr)
}

// errUnplaced wraps a Placement's error: the actor's owner is not known now.
type errUnplaced struct{ err error }

func (e *errUnplaced) Error() string { return "the actor's owner is not known now: " + e.err.Error() }
func (e *errUnplaced) Unwrap() error { return e.err }

// place decides whether an event for c/name runs here: nil if it does, an
// *errElsewhere or *errUnplaced if not. It is the one place that asks the
// Placement (deliver calls it, or the front door before its access check,
// which reads this node's storage).
func (n *Node) place(ctx context.Context, c *class, name string) error {
	addr := abi.Address{Tenant: n.opts.Tenant, Class: c.name, Name: name}
	owner, err := n.opts.Placement.Place(ctx, addr)
	switch {
	case err != nil:
		return &errUnplaced{err}
	case owner != Here:
		return &errElsewhere{addr: addr, owner: owner}
	}
	return nil
}

// notHere reports whether err says the event belongs to another node or
// to an owner not known now.
func notHere(err error) bool {
	var e *errElsewhere
	var u *errUnplaced
	return errors.As(err, &e) || errors.As(err, &u)
}
