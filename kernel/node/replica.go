package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Cluster is what a node with a bucket runs on (nil Options.Cluster: a
// node alone). Each resident actor is then held: its ownership record names
// this process at a generation of the hold's own (ADR 1023), its database
// is the bucket's head (restored from it when the local file is not), and
// every event's writes are shipped to the bucket as one segment when the
// event ends, exec-durable answering once the bucket acknowledged them
// (ADR 1026).
type Cluster struct {
	Member    *cluster.Member  // the node lease, the ownership records and the app's state view, Member.State (cluster.Join)
	Metrics   *metrics.Cluster // its collectors, registered on the node's page
	Retention time.Duration    // --history-retention-secs

	Peers *peers.Network // forwarded requests, relayed upgrades and calls to the other nodes
	// Signer signs this node's calls to its peers, Verifier checks theirs
	// (the cluster secret); nil when the secret could not be used, which
	// stops calls between nodes rather than weakening them.
	Signer   *callsign.Signer
	Verifier *callsign.Verifier
	// PlainCalls believes a signed call on the public port too
	// (--cluster-plaintext accept); otherwise only on the cluster listener.
	PlainCalls bool
}

// restoreDir is the kernel's own directory under the data root where a
// restore builds an actor's database before storage takes it in, and a
// delete its empty database.
const restoreDir = "restore"

// newReplicas starts the node's replication; nil for a node alone.
func (n *Node) newReplicas() (*replication.Replicas, error) {
	c := n.opts.Cluster
	if c == nil {
		return nil, nil
	}
	tmp := filepath.Join(n.opts.DataDir, restoreDir)
	// What a restore or delete left behind in a crash is no one's.
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return nil, err
	}
	n.metrics.Register(c.Metrics, c.Member.Owners.ParkedCount)
	return replication.New(replication.Config{
		Bucket: c.Member.State, Clock: n.clock, Driver: n.storage, Root: n.stateDir, Options: n.opts.Storage,
		TempDir: tmp, Retention: c.Retention,
		Metrics: replication.Metrics{
			DurableWrite: c.Metrics.DurableWrite, Restore: c.Metrics.Restore, SnapshotFailure: c.Metrics.SnapshotFailure,
			Collected: c.Metrics.Collected, CollectFailure: c.Metrics.CollectFailure, RestoreRead: c.Metrics.RestoreRead,
		},
	})
}

// ownerKey names an actor in its ownership record: its name encoded as
// its history's key is.
func ownerKey(addr abi.Address) (ownership.Actor, error) {
	name, err := history.EncodeName(addr.Name)
	return ownership.Actor{Tenant: addr.Tenant, Class: addr.Class, Name: name}, err
}

// errBrokenPublic is what the events of an actor whose history in the
// bucket cannot be restored answer: it is never rolled back to an older
// state instead.
const errBrokenPublic = "the actor's history in the bucket is broken; it is refused until the history is repaired"

// openDatabase opens the actor's database: storage's on a node alone; on a
// node with a bucket, under a new hold of the actor (acquired here, never
// while the node takes no actor: taking.go), as the
// bucket's head: the local file if it is the head, else restored from the
// bucket (restore steps 1 to 7, book ADR 0007).
// An idle actor's expiry (ends.go) acquires it only if its record is
// still at the version listed, naming nobody (listed; "" for any other
// event).
func (a *actor) openDatabase(ctx context.Context, listed bucket.Version) (storage.DB, error) {
	n := a.node
	if n.replicas == nil {
		db, err := n.storage.Open(ctx, n.stateDir, a.addr, n.opts.Storage)
		if err != nil {
			return nil, &failure{public: "internal error", cause: fmt.Errorf("opening database: %w", err)}
		}
		return db, nil
	}
	owners := n.opts.Cluster.Member.Owners
	key, err := ownerKey(a.addr)
	if err != nil {
		return nil, &failure{public: "internal error", cause: err}
	}
	// The one place a hold is acquired: every event kind stops here.
	if err := n.startAcquire(ctx, a.class, a.addr.Name, key); err != nil {
		return nil, err
	}
	var hold ownership.Hold
	if listed != "" {
		hold, err = owners.AcquireUnchanged(ctx, key, listed)
	} else {
		hold, err = owners.Acquire(ctx, key)
	}
	n.acquireDone()
	var held *ownership.HeldError
	switch {
	case errors.As(err, &held):
		if _, lerr := n.opts.Cluster.Member.View.Live(held.Record.Node); lerr == nil {
			// It was taken there since this node placed the event.
			return nil, &placement.Elsewhere{Addr: a.addr, Owner: placement.Owner{Node: held.Record.Node}}
		}
		// Its holder stopped writing its lease and is not fenced yet.
		return nil, unavailable(peers.MsgUnreachable, err)
	case err != nil:
		// A lapse says so once, in its own line; an expiry that found the
		// actor used since is no failure.
		if !errors.Is(err, ownership.ErrLeaseInvalid) && !errors.Is(err, ownership.ErrChanged) {
			n.log.Warn("the node cannot take the actor now", "actor", a.key, "err", err)
		}
		return nil, unavailable("the node cannot take the actor now, retry", err)
	}
	n.forgetOwner(a.addr) // a hint learned before must not route its requests once it is released
	if hold.Unparked {
		n.opts.Cluster.Metrics.ParkedWake()
	}
	start := n.clock.Now()
	stream, db, err := n.replicas.Open(ctx, a.addr, hold.Generation, replication.HoldValid(owners, hold))
	if err == nil && hold.TookOver {
		n.opts.Cluster.Metrics.FailedOver(n.clock.Now().Sub(start))
		n.log.Info("took over an actor from a node that had not released it", "actor", a.key, "generation", hold.Generation)
	}
	if err != nil {
		a.stopErase() // a deleted actor's erase runs only under its hold
		a.releaseHold(hold)
		a.hold = ownership.Hold{} // a deleted actor's, kept through its erase, is released too
		if errors.Is(err, history.ErrBroken) {
			n.log.Error("actor degraded: its history cannot be restored", "actor", a.key, "err", err)
			return nil, &failure{public: errBrokenPublic, cause: err}
		}
		n.log.Warn("restore failed", "actor", a.key, "err", err)
		return nil, unavailable("the actor could not be restored from the bucket now, retry", err)
	}
	a.hold, a.stream = hold, stream
	return db, nil
}

// openHeld is the rule every event of an actor passes where it executes
// (requests, calls, alarms, WebSocket opens, messages and closes: book,
// Running a cluster; issue 24, item 1): with a bucket, an event runs only
// under a hold this process still has, at the generation its database was
// opened under, while the node lease is valid and has not lapsed since
// (ownership.Owners.Check). A resident actor whose hold ended is given up
// first (its instance and database dropped: that copy never runs again)
// and taken afresh: acquired again and restored, or the event is refused
// as the holder's (forwarded there) or as unavailable (503), never run.
// Then the database is opened if it is not (openDB).
func (a *actor) openHeld(ctx context.Context, ev *event) error {
	a.giveUpEnded(ctx)
	err := a.openDB(ctx, ev)
	if err == nil && a.giveUpEnded(ctx) { // the lease lapsed during the restore
		err = unavailable("the node cannot hold the actor now, retry", ownership.ErrNotHeld)
	}
	if err != nil && a.closeSocketOf(ev, websocket.ServiceRestart, "the actor moved, reconnect") {
		// The message cannot run here now: its client reconnects to
		// wherever the actor runs.
		a.node.metrics.OwnerClosed(metrics.OwnerCloseEvent, 1)
	}
	return err
}

// heldThrough is the hold check again once an event ran, before its
// answer: an event that started under a valid hold and outlived it (a long
// call or fetch, a process frozen in it) may have read what a later holder
// has changed since, so its answer is not given; the copy is given up and
// the client gets a 503 that says the event may have run (its writes were
// refused as late, but a durable one acknowledged in time stays).
func (a *actor) heldThrough(ctx context.Context, out outcome) outcome {
	if !a.giveUpEnded(ctx) {
		return out
	}
	return outcome{err: unavailable("the node lost the actor during the event, which may have run; retry only if that is safe", ownership.ErrNotHeld)}
}

// giveUpEnded gives the actor up when it is held and its hold ended
// (ownership's Check), and reports whether it did.
func (a *actor) giveUpEnded(ctx context.Context) bool {
	if a.stream == nil {
		return false
	}
	err := a.node.opts.Cluster.Member.Owners.Check(a.hold)
	if err == nil {
		return false
	}
	a.node.log.Info("the actor's hold ended: its copy here is given up", "actor", a.key, "generation", a.hold.Generation, "err", err)
	a.giveUp(ctx)
	return true
}

// unavailable is a failure the client may retry: 503 with Retry-After.
func unavailable(public string, cause error) *failure {
	return &failure{public: public, cause: cause, retry: true}
}

// ship sends what the event committed to the bucket, when the actor is held
// (a node with a bucket): on the actor's goroutine, before its next event.
// A stream that ended (a failed or late upload) ends the hold: the actor
// is given up here, its instance and database dropped, and its next event
// takes it again, restored from the bucket.
func (a *actor) ship(ctx context.Context) error {
	if a.stream == nil {
		return nil
	}
	_, err := a.stream.Ship(ctx)
	if err != nil && a.stream.Err() != nil {
		a.node.log.Warn("replication stopped: the actor is given up", "actor", a.key, "err", err)
		a.giveUp(ctx)
	}
	return err
}

// afterAnswer ships what the event committed, removes the alarm's index
// entries it replaced and those of a stale delivered time, checkpoints
// what is shipped and takes a periodic snapshot when one is due, or, for a
// deleted actor, removes its entries and starts its erase: after the
// event's answer, never on its path, and before the next event.
func (a *actor) afterAnswer(ctx context.Context) {
	if e := a.erasing; e != nil && e.done == nil {
		a.removeReplaced(ctx, e.stream.Generation()) // the reset is acknowledged
		a.removeStale(ctx, e.stream)
		a.startErase(ctx, e)
		return
	}
	faultHoldUpload(a)
	if a.ship(ctx) != nil || a.stream == nil {
		return
	}
	a.removeReplaced(ctx, a.stream.Generation())
	if a.removeStale(ctx, a.stream); a.stream == nil { // given up
		return
	}
	if err := a.stream.Checkpoint(ctx); err != nil {
		a.node.log.Warn("checkpoint", "actor", a.key, "err", err)
	}
	if _, err := a.stream.Snapshot(ctx); err != nil {
		a.node.log.Warn("snapshot", "actor", a.key, "err", err)
	}
}

// startErase erases a deleted actor's history off its mailbox. The reset's
// snapshot is uploaded here (one small object: from then on a restore reads
// it alone), and the actor keeps the delete's hold, so its next event
// reopens it under that hold, restored from that snapshot, without waiting
// for the rest: the history before the snapshot deleted on a goroutine of
// the node's (its wait group), for as long as the hold lasts. The erase
// never deletes what the reopened actor writes (segments of the hold's
// generation after the snapshot); closeHeld stops it. If the snapshot
// cannot be uploaded the hold is released and nothing is erased: the next
// event restores from the reset segment under a new hold.
func (a *actor) startErase(ctx context.Context, e *erasure) {
	if err := e.stream.ResetSnapshot(ctx); err != nil {
		a.erasing = nil
		a.node.log.Warn("erasing a deleted actor's history: the snapshot of the reset was not stored; its history stays", "actor", a.key, "err", err)
		a.releaseHold(e.hold)
		return
	}
	a.hold = e.hold
	ectx, cancel := context.WithCancel(ctx)
	e.cancel, e.done = cancel, make(chan struct{})
	a.node.wg.Add(1)
	go func() {
		defer a.node.wg.Done()
		defer close(e.done)
		if err := e.stream.EraseHistory(ectx); err != nil && ectx.Err() == nil {
			a.node.log.Warn("erasing a deleted actor's history", "actor", a.key, "err", err)
		}
	}()
}

// stopErase stops a deleted actor's erase still running, and waits for it.
func (a *actor) stopErase() {
	e := a.erasing
	if e == nil || e.done == nil {
		return
	}
	a.erasing = nil
	e.cancel()
	<-e.done
}

// giveUp ends the actor's hold after its stream ended: the instance and the
// database dropped, the hold released.
func (a *actor) giveUp(ctx context.Context) {
	a.discardInstance()
	a.closeHeld(ctx, false)
}

// closeHeld closes the actor's database and, when it is held, first ships
// what is left and afterwards releases the hold (hibernation, a clean
// stop, giving the actor up), or parks it if mayPark and the rules allow
// (park: a hibernation from the idle drop). A deleted actor's erase still
// running is stopped first: what it left is history no restore reads,
// collected after the actor's next snapshot. Index entries still waiting
// to be removed stay: extra entries, removed as stale once delivered.
func (a *actor) closeHeld(ctx context.Context, mayPark bool) {
	a.stopErase()
	a.replaced = nil
	if a.stream != nil {
		if err := a.stream.Close(ctx); err != nil {
			a.node.log.Warn("closing the actor's replication: its last writes may not be in the bucket", "actor", a.key, "err", err)
		}
	}
	if a.db != nil {
		if err := a.db.Close(); err != nil {
			a.node.log.Error("closing database", "actor", a.key, "err", err)
		}
		a.db = nil
	}
	if a.stream != nil || a.hold.Generation != 0 {
		if !mayPark || a.stream == nil || !a.park(a.hold) {
			a.releaseHold(a.hold)
		}
		a.stream, a.hold = nil, ownership.Hold{}
	}
}

// releaseHold writes the actor's record naming nobody, and the node it
// moves to if a move is under way (moveSuccessor); one that does not land
// is left to the ownership's background pass.
func (a *actor) releaseHold(h ownership.Hold) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.node.ctx), ownership.ReleaseTimeout)
	defer cancel()
	if err := a.node.opts.Cluster.Member.Owners.ReleaseTo(ctx, h, a.node.moveSuccessor(a.key)); err != nil && !errors.Is(err, ownership.ErrReleasePending) {
		a.node.log.Warn("releasing the actor's ownership record", "actor", a.key, "err", err)
	}
}

// carryMark records in a delete's empty database the operator's delete
// carried out last (ends.go): the one this event carries out, or the one
// the actor's database recorded, so that a request left behind never
// deletes an actor created after it was carried out.
func (a *actor) carryMark(ctx context.Context, empty storage.DB) error {
	mark := a.state.operatorMark
	if mark == "" && a.db != nil {
		v, _, err := metaValue(ctx, a.db, operatorDeleteKey)
		if err != nil {
			return err
		}
		mark = v
	}
	if mark == "" {
		return nil
	}
	_, err := empty.HostExec(ctx, "INSERT OR REPLACE INTO "+metaTable+" (key, value) VALUES ('"+operatorDeleteKey+"', ?)", text(mark))
	return err
}

// resetHeld is a held actor's delete (book ADR 0028 section 1): a reset
// segment of an empty database, built in scratch space, on the stream's
// head, acknowledged under the acknowledgement rule before the delete
// counts; then the local files removed and the database closed, so its
// next event restores the empty database, while the history before the
// reset is erased in the background (startErase).
func (a *actor) resetHeld(ctx context.Context) error {
	n := a.node
	scratch, err := os.MkdirTemp(filepath.Join(n.opts.DataDir, restoreDir), "delete-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	opts := n.opts.Storage
	opts.Replication = true
	empty, err := n.storage.Open(ctx, scratch, a.addr, opts)
	if err != nil {
		return err
	}
	err = hostTables(ctx, empty)
	if err == nil {
		err = a.carryMark(ctx, empty)
	}
	if err == nil {
		err = a.stream.Reset(ctx, empty)
	}
	if cerr := empty.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if a.stream.Err() != nil {
			// Given up when the event ends: a durable delete runs inside
			// the guest's call, whose instance must not go under it.
			a.state.unheld = true
		}
		return err
	}
	// The reset's state names no alarm entry: the one named until now
	// goes with those the event replaced, after the answer.
	if named, err := readIndexed(ctx, a.db); err != nil {
		n.log.Warn("reading the deleted actor's alarm entry: it stays until it is delivered", "actor", a.key, "err", err)
	} else {
		a.replace(named)
	}
	stream := a.stream
	a.stream = nil // nothing more is shipped: the database goes
	if a.db != nil {
		err = a.db.Close()
		a.db = nil
	}
	a.deleted.Store(true)
	if rerr := n.storage.Remove(ctx, n.stateDir, a.addr); err == nil {
		err = rerr
	}
	a.stopErase() // an earlier delete's, under this hold
	a.erasing = &erasure{stream: stream, hold: a.hold}
	a.hold = ownership.Hold{}
	return err
}

// erasure is a deleted actor's history to erase after the event's answer,
// under the delete's hold.
type erasure struct {
	stream *replication.Stream
	hold   ownership.Hold
	cancel context.CancelFunc // stops the background erase
	done   chan struct{}      // closed once it ended; nil until it starts
}
