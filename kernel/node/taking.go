package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// Taking actors (book ADR 0014 and ADR 0016's fail-closed rule; ADR
// 1051): a node takes actors unless some reason says it must not (its
// secrets cannot be opened; a drain). While one does, it claims no actor
// (openDatabase: the one place a hold is acquired; the placement sends an
// actor no node holds to a peer that takes actors) and hands over those
// it holds, so a node that can run them takes them.

// StopTaking makes the node take no actor for reason until ResumeTaking
// withdraws it; reasons add up.
func (n *Node) StopTaking(reason string) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	if n.notTaking == nil {
		n.notTaking = map[string]bool{}
	}
	n.notTaking[reason] = true
}

// ResumeTaking withdraws reason; the node takes actors again once no
// reason is left.
func (n *Node) ResumeTaking(reason string) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	delete(n.notTaking, reason)
}

// NotTaking lists why the node takes no actor now, sorted; none when it
// takes them.
func (n *Node) NotTaking() []string {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	return slices.Sorted(maps.Keys(n.notTaking))
}

// takesNone reports whether some reason says the node takes no actor.
func (n *Node) takesNone() bool {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	return len(n.notTaking) > 0
}

// handOverBatch is how many actors a node that takes none hands over at a
// time (book ADR 0014: a constant, not a flag).
const handOverBatch = 16

// closeEventsWait bounds how long a hand-over waits for the close events
// of the sockets it closed (book ADR 0014: 5 s); a client slow to answer
// the close leaves its event unrun.
const closeEventsWait = 5 * time.Second

// awaitSocketsGone waits until no socket of the actor key (of any actor,
// for "") is open here, for up to closeEventsWait: the close events of the
// sockets just closed run in their mailboxes meanwhile. It returns ctx's
// error if ctx ends first.
func (n *Node) awaitSocketsGone(ctx context.Context, key string) error {
	open := func() bool { return n.ws.Has(key) }
	if key == "" {
		open = func() bool { return n.ws.Len() > 0 }
	}
	for wait := n.clock.Now().Add(closeEventsWait); open() && n.clock.Now().Before(wait); {
		if err := clock.Sleep(ctx, n.clock, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// batchWait bounds how long a hand-over waits for a batch's queues (book
// ADR 0014: 30 s): then it moves on, and the actors left hibernate once
// their queues ran, taking no new event meanwhile.
const batchWait = 30 * time.Second

// runTaking is the node's taking pass, as it starts (a node started while
// drained claims nothing) and then once per lease period until it stops:
// it reads its drain request, hands over what it holds while it takes no
// actor, and says in its heartbeat how far it is and why (line 12).
func (n *Node) runTaking() {
	m := n.opts.Cluster.Member
	for {
		n.readDrainRequest()
		n.runMoves()
		say := func(t nodelease.Taking) { m.Lease.SetTaking(t, n.NotTaking()) }
		say(n.handOver(say))
		if clock.Sleep(n.ctx, n.clock, m.Lease.Settings().Period()) != nil {
			return
		}
	}
}

// readDrainRequest stops or resumes taking for nodelease.ReasonDrain as
// the drain request (cluster.DrainKey) says; one that cannot be read
// changes nothing, so a bucket failure never undrains a node.
func (n *Node) readDrainRequest() {
	ctx, cancel := clock.WithTimeout(n.ctx, n.clock, n.opts.Cluster.Member.Lease.Settings().AttemptTimeout())
	defer cancel()
	requested, err := cluster.DrainRequested(ctx, n.opts.Cluster.Member.Root, n.opts.Cluster.Member.Lease.NodeID())
	switch {
	case err != nil:
		n.log.Warn("reading the node's drain request: the node keeps what it read last", "err", err)
	case requested && !n.takesNoneFor(nodelease.ReasonDrain):
		n.log.Info("drain requested: the node takes no actor and hands over those it holds")
		n.StopTaking(nodelease.ReasonDrain)
	case !requested && n.takesNoneFor(nodelease.ReasonDrain):
		n.log.Info("drain withdrawn: the node takes actors again")
		n.ResumeTaking(nodelease.ReasonDrain)
	}
}

func (n *Node) takesNoneFor(reason string) bool {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	return n.notTaking[reason]
}

// handOver is one hand-over while the node takes no actor, and the state
// its heartbeat then says. Its WebSockets close with 1012 (clients
// reconnect through a node that takes the actor), those of rooms that
// hibernated here too, and their close events run (closeEventsWait); then
// each resident actor, handOverBatch at a time, takes no new event (a 503
// for a moment), and, unless it has a socket again (closed, and the actor
// left for the next pass), runs its queued events and hibernates as an
// idle one does: what it committed shipped, its hold released, so that its next
// event is placed on a peer that takes actors; one with an alarm pending
// is taken by such a peer at once (handOffAlarms), so the alarm fires
// there on time; so is one that hibernated before the drain, and one
// whose hand-off failed is tried again each pass, the node draining, not
// drained, until none is left. A batch that outlasts
// batchWait ends the pass; the pass reads the drain request again each
// lease period meanwhile, so an undrain is not left waiting. With no such
// peer it keeps serving them: stuck.
func (n *Node) handOver(say func(nodelease.Taking)) nodelease.Taking {
	if !n.takesNone() {
		n.resumeLeft()
		return nodelease.Takes
	}
	if len(placement.Takers(n.opts.Cluster.Member.View, n.opts.App.String())) == 0 {
		if n.holdsAny() {
			return nodelease.Stuck
		}
		return nodelease.Drained
	}
	// Every pass, before the hand-overs (ADR 1055): a park that checked
	// the node took actors just before it stopped lands after the first.
	reason := metrics.ParkedNotTaking // its secrets, say: no drain asked
	if n.takesNoneFor(nodelease.ReasonDrain) {
		reason = metrics.ParkedDrain
	}
	n.releaseAllParked(n.ctx, reason)
	if !n.holdsAny() {
		return n.drainedUnless(n.handOffAlarms())
	}
	say(nodelease.Draining) // while the batches run
	n.metrics.OwnerClosed(metrics.OwnerCloseDrain, n.ws.CloseAll(websocket.ServiceRestart, closeReason))
	// Their close events run here, under the holds, before those go: one
	// queued after the release would find no hold and never run.
	n.awaitSocketsGone(n.ctx, "") //nolint:errcheck // a node that stops ends the batches below
	reread := n.clock.NewTimer(n.opts.Cluster.Member.Lease.Settings().Period())
	defer reread.Stop()
	for n.takesNone() && n.ctx.Err() == nil {
		batch := n.heldResidents(handOverBatch)
		if len(batch) == 0 {
			break
		}
		var stopped []*actor
		for _, a := range batch {
			a.handingOver.Store(true) // no upgrade either from now on
			if n.ws.Has(a.key) {
				// A socket accepted since they closed, or one still
				// closing: its close event runs here first, under the
				// hold, and the actor waits for the next pass.
				n.metrics.OwnerClosed(metrics.OwnerCloseDrain, n.ws.CloseActor(a.key, websocket.ServiceRestart, closeReason))
				continue
			}
			a.stop()
			stopped = append(stopped, a)
		}
		all := n.awaitBatch(stopped, reread)
		n.handOffAlarms()
		if !all || len(stopped) < len(batch) {
			break
		}
	}
	switch {
	case !n.takesNone(): // undrained meanwhile
		return nodelease.Takes
	case n.holdsAny():
		return nodelease.Draining
	}
	return n.drainedUnless(n.handOffAlarms())
}

// drainedUnless is the state of a node that holds nothing: draining while
// alarmsLeft alarms on its timer are still to be handed off to a peer
// (handOffAlarms), drained once none is.
func (n *Node) drainedUnless(alarmsLeft int) nodelease.Taking {
	if alarmsLeft > 0 {
		return nodelease.Draining
	}
	return nodelease.Drained
}

// closeReason is the reason of the 1012 closes of a hand-over.
const closeReason = "the node hands its actors over, reconnect"

// resumeLeft lets the actors a hand-over left for its next pass (their
// sockets) take events again: the node takes actors again.
func (n *Node) resumeLeft() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.actors {
		if !a.stopped() {
			a.handingOver.Store(false)
		}
	}
}

// awaitBatch waits until every actor of batch hibernated, for up to
// batchWait, reading the drain request each time reread fires (each lease
// period); false when it stopped waiting: the time is up, the node takes
// actors again, or it stops.
func (n *Node) awaitBatch(batch []*actor, reread clock.Timer) bool {
	period := n.opts.Cluster.Member.Lease.Settings().Period()
	end := n.clock.Now().Add(batchWait)
	for _, a := range batch {
		for hibernated := false; !hibernated; {
			select {
			case <-a.done:
				hibernated = true
			case <-n.ctx.Done():
				return false
			case <-reread.C():
				n.readDrainRequest()
				if !n.takesNone() || !n.clock.Now().Before(end) {
					return false
				}
				reread.Reset(period)
			}
		}
	}
	return true
}

// heldResidents are up to max resident actors this node holds and has
// not stopped yet: one resident without a hold (woken since, refused at
// its acquire) holds nothing to hand over. Those with an alarm on the
// timer come first, the earliest due first, so that an alarm due during
// the drain fires on the actor's new owner as often as it can.
func (n *Node) heldResidents(max int) []*actor {
	n.mu.Lock()
	resident := slices.Collect(maps.Values(n.actors))
	n.mu.Unlock()
	type held struct {
		a        *actor
		due      time.Time
		hasAlarm bool
	}
	var all []held
	for _, a := range resident {
		if a.stopped() { // by an earlier batch
			continue
		}
		if key, err := ownerKey(a.addr); err == nil {
			if _, ok := n.opts.Cluster.Member.Owners.Owns(key); ok {
				due, hasAlarm := n.alarms.At(a.key)
				all = append(all, held{a, due, hasAlarm})
			}
		}
	}
	slices.SortFunc(all, func(x, y held) int {
		switch {
		case x.hasAlarm != y.hasAlarm:
			if x.hasAlarm {
				return -1
			}
			return 1
		default:
			return x.due.Compare(y.due)
		}
	})
	out := make([]*actor, 0, min(max, len(all)))
	for _, h := range all[:min(max, len(all))] {
		out = append(out, h.a)
	}
	return out
}

// holdsAny reports whether the node holds an actor, has a release or an
// acquisition unresolved (ownership's pending: a drain ends only at
// zero), an acquire under way, or a WebSocket open. The acquires are read
// first: one that ends between the two reads is in the holds by then.
func (n *Node) holdsAny() bool {
	n.takeMu.Lock()
	acquiring := n.acquiring
	n.takeMu.Unlock()
	owners := n.opts.Cluster.Member.Owners
	return acquiring > 0 || len(owners.Holds()) > 0 || owners.Pending() > 0 || n.ws.Len() > 0
}

// claiming is the placement's view of the reasons (placement.Claiming): a
// drain alone still claims an actor no peer takes; any other reason
// claims none.
func (n *Node) claiming() placement.Claiming {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	switch {
	case len(n.notTaking) == 0:
		return placement.Claims
	case len(n.notTaking) == 1 && n.notTaking[nodelease.ReasonDrain]:
		return placement.ClaimsLast
	}
	return placement.ClaimsNone
}

// startAcquire lets an acquire of the hold of key (c/name) through,
// counted as under way until acquireDone (holdsAny), while the node takes
// actors, or, taking none, when it holds the actor already (a deleted
// actor's, kept through its erase) or drains and no peer takes actors
// (placement.KeepsUnheld), and the actor is not moving to another node
// (move.go). Otherwise it returns the event's refusal: the move's target,
// peer that takes the actor (placement.Elsewhere: forwarded or called
// there), or a 503. The check and the count are one step while the node
// takes actors, so a drain that begins meanwhile sees the acquire.
func (n *Node) startAcquire(ctx context.Context, c *class, name string, key ownership.Actor) error {
	n.takeMu.Lock()
	if target := n.moving[n.actorKey(c, name)].target; target != "" {
		n.takeMu.Unlock()
		// The actor moves there (move.go): its events follow it, to a
		// node that holds nothing yet.
		return &placement.Elsewhere{Addr: abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}, Owner: placement.Owner{Node: target, Successor: true}}
	}
	ok := len(n.notTaking) == 0
	if ok {
		n.acquiring++
	}
	n.takeMu.Unlock()
	if ok {
		return nil
	}
	m := n.opts.Cluster.Member
	if _, held := m.Owners.Owns(key); held || placement.KeepsUnheld(n.claiming(), m.View, n.opts.App.String()) {
		n.takeMu.Lock()
		n.acquiring++
		n.takeMu.Unlock()
		return nil
	}
	err := n.place(ctx, c, name)
	var elsewhere *placement.Elsewhere
	switch {
	case errors.As(err, &elsewhere):
		return err
	case err == nil: // a placement that leaves every actor here (placement.Local)
		err = &placement.Unplaced{Err: placement.ErrNoTaker}
	}
	// Still placement.NotHere, so every path treats it as an event for
	// another node: a request or upgrade is refused with 503, a socket
	// closes with 1012.
	if errors.Is(err, placement.ErrNoTaker) {
		return unavailable("this node takes no actor now and no other node of the app does, retry", err)
	}
	return unavailable("the actor's owner is not known now, retry", err)
}

// acquireDone ends what startAcquire let through.
func (n *Node) acquireDone() {
	n.takeMu.Lock()
	n.acquiring--
	n.takeMu.Unlock()
}
