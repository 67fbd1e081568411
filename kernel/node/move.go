package node

import (
	"errors"
	"log/slog"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// Moving one actor (book ADR 0017 as revised; ADR 1052): `wasmkeep actor
// move` writes a move request (cluster.MoveKey) under the app's root. Once
// per lease period a node that takes actors lists them: the holder of an
// actor moves it (a drain of that one actor, then a take call to the
// target), and the target takes an actor nobody holds itself.

// maxMoves is how many moves a node runs at a time (the book's 16).
const maxMoves = 16

// moveDeadline bounds one move (the book's 30 s) from its start: its
// queued events, then the take, which has at most what is left of it and
// never more than its own takeTimeout.
const moveDeadline = 30 * time.Second

// runMoves is one pass over the app's move requests. A node that takes no
// actor does nothing: its drain moves everything. Failures leave the
// request for a later pass, until it expires.
func (n *Node) runMoves() {
	if n.takesNone() {
		return
	}
	m := n.opts.Cluster.Member
	ctx, cancel := clock.WithTimeout(n.ctx, n.clock, m.Lease.Settings().AttemptTimeout())
	moves, err := cluster.ListMoves(ctx, m.State)
	cancel()
	if err != nil {
		n.log.Warn("listing move requests", "err", err)
		return
	}
	self := m.Lease.NodeID()
	listed := n.newestMoves(moves)
	n.forgetMoveWaits(listed)
	for _, mv := range listed {
		c := n.class(mv.Class)
		if c == nil { // left to the nodes that serve it
			continue
		}
		key := n.actorKey(c, mv.Name)
		owner, err := ownerKey(abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: mv.Name})
		if err != nil {
			continue
		}
		// A parked record (ADR 1055) names this node too: the actor is
		// here, hibernated with its sockets open.
		_, held := m.Owners.Owns(owner)
		held = held || m.Owners.Parked(owner)
		switch {
		case mv.Target == self && held:
			n.dropMove(mv, "the actor is here")
		case mv.Target == self:
			n.startTake(key, func() { n.takeMoved(c, mv) })
		case held:
			n.moveOut(c, key, owner, mv)
		}
	}
}

// forgetMoveWaits forgets the waits said of requests no longer listed.
func (n *Node) forgetMoveWaits(listed []cluster.Move) {
	keep := make(map[string]bool, len(listed))
	for _, mv := range listed {
		if n.moveWaitsSaid[mv.Key] {
			keep[mv.Key] = true
		}
	}
	n.moveWaitsSaid = keep
}

// newestMoves drops expired requests, and all but the newest of those that
// name the same actor (deleted), and returns the rest.
func (n *Node) newestMoves(moves []cluster.Move) []cluster.Move {
	newest := map[string]cluster.Move{}
	for _, mv := range moves {
		if n.clock.Now().Sub(mv.Written) > cluster.MoveExpiry {
			n.dropMove(mv, "expired")
			continue
		}
		actor := mv.Class + "/" + mv.Name
		if old, ok := newest[actor]; ok {
			if !mv.Written.After(old.Written) {
				n.dropMove(mv, "a newer request names the actor")
				continue
			}
			n.dropMove(old, "a newer request names the actor")
		}
		newest[actor] = mv
	}
	out := make([]cluster.Move, 0, len(newest))
	for _, mv := range newest {
		out = append(out, mv)
	}
	return out
}

// dropMove deletes a move request, saying why.
func (n *Node) dropMove(mv cluster.Move, why string) {
	ctx, cancel := clock.WithTimeout(n.ctx, n.clock, n.opts.Cluster.Member.Lease.Settings().AttemptTimeout())
	defer cancel()
	switch err := cluster.DropMove(ctx, n.opts.Cluster.Member.State, mv); {
	case errors.Is(err, bucket.ErrPrecondition):
		n.log.Info("move request written again since it was listed: kept", "key", mv.Key)
		return
	case err != nil:
		n.log.Warn("deleting a move request", "key", mv.Key, "err", err)
		return
	}
	n.log.Info("move request done", "actor", mv.Class+"/"+mv.Name, "to", mv.Target, "why", why)
}

// takeMoved is the target's side: an actor nobody holds (another node's
// holder acts; this node leaves it) is taken here, as a take call would
// have it taken; in the background, so one slow to restore holds up no
// pass.
func (n *Node) takeMoved(c *class, mv cluster.Move) {
	ctx, cancel := clock.WithTimeout(n.ctx, n.clock, takeTimeout)
	defer cancel()
	var elsewhere *placement.Elsewhere
	switch err := n.take(ctx, c, mv.Name); {
	case err == nil:
		n.dropMove(mv, "taken")
	case errors.Is(err, errNoSuchActor):
		n.dropMove(mv, "no such actor")
	case errors.As(err, &elsewhere):
		// Its holder moves it.
	default:
		n.log.Warn("taking a moved actor: tried again later", "actor", mv.Class+"/"+mv.Name, "err", err)
	}
}

// moveOut starts the holder's side of a move of the actor key (owner, its
// ownership record's name), unless one is under way for the actor,
// maxMoves are, or the target is not an eligible peer now (the request
// then waits for a later pass, said once per request at Info).
func (n *Node) moveOut(c *class, key string, owner ownership.Actor, mv cluster.Move) {
	if !n.eligibleTarget(mv.Target) {
		level := slog.LevelDebug
		if !n.moveWaitsSaid[mv.Key] {
			n.moveWaitsSaid[mv.Key] = true
			level = slog.LevelInfo
		}
		n.log.Log(n.ctx, level, "move request waits: its target is not now a live peer of the app that takes actors and answers take calls", "actor", key, "to", mv.Target)
		return
	}
	n.takeMu.Lock()
	_, under := n.moving[key]
	start := !under && len(n.moving) < maxMoves
	if start {
		if n.moving == nil {
			n.moving = map[string]moveState{}
		}
		n.moving[key] = moveState{} // the target once its sockets closed (move)
	}
	n.takeMu.Unlock()
	if start && !n.goTask(func() { n.move(c, key, owner, mv) }) {
		n.takeMu.Lock()
		delete(n.moving, key)
		n.takeMu.Unlock()
	}
}

// moveState is a move under way (Node.moving): its target once the
// actor's sockets closed, and the successor its release named.
type moveState struct {
	target string
	next   ownership.Successor
}

// moveSuccessor is the successor a release of the actor key writes (ADR
// 1070): while a move of it is under way past its sockets' close, its
// target's live process, for as long as the take may take from the
// release (a parked record's release may come first); none otherwise. So
// the events another node gets for the actor go to the target rather than
// claim it in the moment between the release and the take. It is decided
// once a move, and kept for a failed take's clearing.
func (n *Node) moveSuccessor(key string) ownership.Successor {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	st, ok := n.moving[key]
	if !ok || st.target == "" || st.next.Node != "" {
		return st.next
	}
	p, err := n.opts.Cluster.Member.View.Live(st.target)
	if err != nil {
		return ownership.Successor{}
	}
	st.next = ownership.Successor{Node: st.target, Instance: p.Object.Instance, Until: n.clock.Now().Add(ownership.ReleaseTimeout + takeTimeout)}
	n.moving[key] = st
	return st.next
}

// eligibleTarget reports whether node id is a peer a move may go to: a
// live one of the app that takes actors and answers take calls.
func (n *Node) eligibleTarget(id string) bool {
	for _, p := range placement.Takers(n.opts.Cluster.Member.View, n.opts.App.String()) {
		if p.ID == id {
			return p.Object.Info.HasCapability(nodelease.CapabilityTake)
		}
	}
	return false
}

// move hands the actor key (owner) over to mv.Target, as a drain hands
// over one actor, then has the target take it: its sockets close with 1012
// and their close events run here (a parked actor's wake it here, so it
// is resident then), it takes no new event, its queued events run and it
// hibernates, its hold released; from the sockets' close until the move
// ends this node acquires it no more (startAcquire), so its events go to
// the target. A take the target carries out ends the move: the
// request is deleted and this node forgets the alarm it handed over. Any
// other outcome leaves the request for a later pass; the actor, free,
// is claimed by its next event wherever it lands.
func (n *Node) move(c *class, key string, owner ownership.Actor, mv cluster.Move) {
	defer func() {
		n.takeMu.Lock()
		delete(n.moving, key)
		n.takeMu.Unlock()
	}()
	deadline := n.clock.Now().Add(moveDeadline)
	n.metrics.OwnerClosed(metrics.OwnerCloseMove, n.ws.CloseActor(key, websocket.ServiceRestart, "the actor moves to another node, reconnect"))
	if n.awaitSocketsGone(n.ctx, key) != nil {
		return
	}
	if n.ws.Has(key) { // a socket that will not close: tried again later
		return
	}
	n.takeMu.Lock()
	n.moving[key] = moveState{target: mv.Target}
	n.takeMu.Unlock()
	n.mu.Lock()
	a := n.actors[key]
	n.mu.Unlock()
	if a != nil {
		a.handingOver.Store(true)
		a.stop()
		t := n.clock.NewTimer(deadline.Sub(n.clock.Now()))
		defer t.Stop()
		select {
		case <-a.done:
		case <-t.C(): // it hibernates once its queue ran
			n.log.Warn("moving an actor: its queued events did not end in time; tried again later", "actor", key)
			return
		case <-n.ctx.Done():
			return
		}
	}
	// Its last socket's freed slot released a parked record, or is
	// releasing it: this waits for that write (the actor's lock), so the
	// target does not find the record naming this node.
	n.releaseParkedTo(owner, metrics.ParkedMove, n.moveSuccessor(key))
	at, hasAlarm := n.alarms.At(key)
	ctx, cancel := clock.WithTimeout(n.ctx, n.clock, deadline.Sub(n.clock.Now()))
	defer cancel()
	if err := n.sendTake(ctx, mv.Target, c.name, mv.Name); err != nil {
		// Its events go where they land again, not to the target.
		cctx, cancel := clock.WithTimeout(n.ctx, n.clock, n.opts.Cluster.Member.Lease.Settings().AttemptTimeout())
		defer cancel()
		n.takeMu.Lock()
		next := n.moving[key].next
		n.takeMu.Unlock()
		if err := n.opts.Cluster.Member.Owners.ClearSuccessor(cctx, owner, next); err != nil {
			n.log.Warn("moving an actor: clearing its successor; it ends on its own", "actor", key, "err", err)
		}
		if errors.Is(err, errTakeFinal) && !errors.Is(err, errTakeHeld) {
			// Not its to take, or not restorable there: asking again
			// would only close the actor's sockets every pass.
			n.dropMove(mv, "the target refuses it: "+err.Error())
			return
		}
		n.log.Warn("moving an actor: the target did not take it; tried again later", "actor", key, "to", mv.Target, "err", err)
		return
	}
	if hasAlarm {
		n.alarms.ClearAt(key, at)
	}
	n.log.Info("actor moved", "actor", key, "to", mv.Target)
	n.dropMove(mv, "moved")
}
