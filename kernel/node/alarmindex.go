package node

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The owner's side of the alarm index in the bucket (book ADR 0009, point
// 2; ADR 1048): a held actor's committed alarm is listed in the index
// before the commit that set it is shipped, the entry recorded in the
// database (alarm_indexed) so that the shipped state names it, and the
// entry it replaced removed once that state is in the bucket. A node alone
// has no index.

// indexedKey is the metadata row that names the entry listing the
// committed alarm: alarmindex.Indexed's encoding, "" for none.
const indexedKey = "alarm_indexed"

// readIndexed is the entry db records as its alarm's (none if unrecorded):
// the one entry the state names, which a stale cleanup spares.
func readIndexed(ctx context.Context, db storage.DB) (alarmindex.Indexed, error) {
	v, _, err := metaValue(ctx, db, indexedKey)
	if err != nil {
		return alarmindex.Indexed{}, err
	}
	return alarmindex.ParseIndexed(v)
}

// recordedEntry is the entry the actor's database records: none after a
// delete (its database is closed).
func (a *actor) recordedEntry(ctx context.Context) (alarmindex.Indexed, error) {
	if a.db == nil {
		return alarmindex.Indexed{}, nil
	}
	return readIndexed(ctx, a.db)
}

// indexAlarm brings the index in line with the held actor's committed
// alarm before it is shipped: a changed alarm gets a fresh entry under the
// stream's generation (alarmindex.List, after the hold is checked), and
// the database records it (or none, for a cleared alarm) in a commit of
// its own that the next Ship carries; the entry it replaced waits in
// a.replaced for removeReplaced. An unchanged alarm keeps its entry,
// whichever owner wrote it. An error means the index could not be brought
// in line: the caller abandons the stream and gives the actor up, so that
// no state naming a missing entry (or none for a pending alarm) reaches
// the bucket. A PUT that lands after all is an extra entry, delivered once
// and then removed as stale.
func (a *actor) indexAlarm(ctx context.Context) error {
	at, _, pending, err := alarm.Read(ctx, a.db)
	if err != nil {
		return err
	}
	named, err := readIndexed(ctx, a.db)
	if err != nil {
		return err
	}
	if pending == !named.None() && (!pending || named.At == at) {
		return nil
	}
	c := a.node.opts.Cluster
	if err := c.Member.Owners.Check(a.hold); err != nil {
		return err
	}
	var listed alarmindex.Indexed
	if pending {
		// One attempt, bounded as an upload's first: the provider resends
		// the same PUT itself.
		pctx, cancel := clock.WithTimeout(ctx, a.node.clock, replication.UploadAttempt)
		k, err := alarmindex.List(pctx, c.Member.State, replication.Actor(a.addr), at, a.stream.Generation(), alarmindex.RandomNonces)
		cancel()
		if err != nil {
			return err
		}
		listed = k.Indexed()
	}
	if _, err := a.db.HostExec(ctx, "INSERT OR REPLACE INTO "+metaTable+" (key, value) VALUES ('"+indexedKey+"', ?)", text(listed.Encode())); err != nil {
		return err
	}
	a.replace(named)
	return nil
}

// replace keeps entry x, which the state no longer names, for
// removeReplaced.
func (a *actor) replace(x alarmindex.Indexed) {
	if !x.None() {
		a.replaced = append(a.replaced, x)
	}
}

// errIndex is what an event answers when its alarm could not be listed:
// the actor was given up and its writes since the last upload are lost.
var errIndex = errors.New("the alarm could not be listed in the bucket's index")

// abandonForIndex abandons the stream after indexAlarm failed, so that
// nothing committed since the last upload is shipped. The caller gives the
// actor up: at once, or when the event ends (an exec-durable runs inside
// the guest's call, whose instance must not go under it).
func (a *actor) abandonForIndex(err error) {
	a.node.log.Warn("the alarm could not be listed in the bucket's index: the actor is given up", "actor", a.key, "err", err)
	a.stream.Abandon(errors.Join(errIndex, err))
}

// removeReplaced removes the entries a.replaced holds, once the state that
// replaced them is in the bucket (every commit so far acknowledged, or a
// delete's reset, whose state names none): under the hold's generation
// gen, none above it (R3). One that stays (a failed or refused delete) is
// an extra entry, removed as stale once it is delivered.
func (a *actor) removeReplaced(ctx context.Context, gen uint64) {
	replaced := a.replaced
	a.replaced = nil
	if len(replaced) == 0 {
		return
	}
	current, err := a.recordedEntry(ctx)
	if err != nil {
		a.node.log.Warn("reading the alarm's entry: the entries it replaced stay", "actor", a.key, "err", err)
		return
	}
	c := a.node.opts.Cluster
	for _, x := range replaced {
		dctx, cancel := clock.WithTimeout(ctx, a.node.clock, replication.UploadAttempt)
		err := alarmindex.RemoveReplaced(dctx, c.Member.State, replication.Actor(a.addr), x, current, gen)
		cancel()
		if err != nil {
			a.node.log.Warn("removing the alarm's replaced entry", "actor", a.key, "entry", x, "err", err)
		}
	}
}

// staleDelivery is an alarm delivered for a time the committed alarm does
// not hold (book ADR 0009, point 4): the actor's entries at that time are
// stale.
type staleDelivery struct {
	at int64
	// drop: the delivery created the actor's database here (restored from
	// the bucket), and the actor has no state (no committed alarm, no
	// on-init recorded: deleted since, or never initialised), so the copy
	// is dropped once its entries are removed.
	drop bool
}

// alarmDue reads the committed alarm of an actor an alarm was delivered
// to for the time delivered, before anything of it runs: on-init and
// on-alarm run only if that alarm is due, so a stale time never runs
// on-alarm, and an actor with no state is not run, which would only
// create it again. Otherwise the timer follows the database. With a
// bucket, a delivered time the committed alarm does not hold is stale:
// its entries are removed once the event is shipped (removeStale). (An
// actor the delivery found neither here nor in the bucket never gets
// here: openDB gave it up.)
func (a *actor) alarmDue(ctx context.Context, delivered int64) (bool, error) {
	at, _, pending, err := alarm.Read(ctx, a.db)
	if err != nil {
		return false, &failure{public: "internal error", cause: err}
	}
	st := &a.state
	if a.stream != nil && (!pending || at != delivered) {
		st.stale = &staleDelivery{at: delivered}
	}
	if a.alarmIsDue(at, pending) {
		return true, nil
	}
	st.alarmTouched = true // a stale schedule: follow the database
	if st.created && !pending {
		_, initialised, err := metaValue(ctx, a.db, initVersionKey)
		if err != nil {
			return false, &failure{public: "internal error", cause: err}
		}
		st.stale.drop = !initialised
	}
	return false, nil
}

// removeStale removes the entries of a stale delivered time once the event
// is shipped (book ADR 0009, point 4; R2, R3): every entry of the actor at
// that time but the one the replicated state names (none after a delete)
// and a newer owner's. s is the stream that shipped that state: the
// hold's, or a delete's. An owner that has uploaded nothing under its
// hold fences first (fence). A failure leaves the entries, removed when
// the time is delivered again.
func (a *actor) removeStale(ctx context.Context, s *replication.Stream) {
	d := a.state.stale
	a.state.stale = nil
	if d == nil {
		return
	}
	named, err := a.recordedEntry(ctx)
	if err != nil {
		a.node.log.Warn("reading the alarm's entry: the stale entries stay", "actor", a.key, "err", err)
		return
	}
	req := alarmindex.Stale{Actor: replication.Actor(a.addr), At: d.at, Named: named, Replicated: true, Gen: s.Generation()}
	for fenced := false; ; fenced = true {
		head := s.Head()
		req.Fenced, req.BucketHadNothing = head.Gen == req.Gen, head.TXID == 0
		dctx, cancel := clock.WithTimeout(ctx, a.node.clock, replication.UploadAttempt)
		r, err := alarmindex.RemoveStale(dctx, a.node.opts.Cluster.Member.State, req)
		cancel()
		switch {
		case errors.Is(err, alarmindex.ErrNotFenced) && !fenced:
			if err := a.fence(ctx); err != nil {
				a.node.log.Warn("fencing the hold before removing stale alarm entries: they stay", "actor", a.key, "err", err)
				return
			}
			continue
		case errors.Is(err, alarmindex.ErrBucketHadNothing) && a.stream == s:
			// The hold's stream (a delete's shipped its reset, so never
			// gets here): leaveEntries has its stream and database.
			a.leaveEntries(ctx, d.at, false)
			return
		case err != nil:
			a.node.log.Warn("removing stale alarm entries: they stay until delivered again", "actor", a.key, "at", d.at, "err", err)
			return
		}
		a.node.log.Debug("stale alarm entries removed", "actor", a.key, "at", d.at, "removed", len(r.Removed), "newer", len(r.Newer))
		if d.drop {
			a.dropCopy(ctx)
		}
		return
	}
}

// fenceKey is the metadata row of the one-line change that fences a hold:
// the hold's generation.
const fenceKey = "owner_fence"

// fence ships the hold's one-line owner_fence change (book ADR 0009, R2):
// until a hold has uploaded something of its own, an earlier owner's
// upload landing late can still become the state and name an entry about
// to be removed as stale. Shipped, the stream's head is the hold's own, so
// a hold fences once at most.
func (a *actor) fence(ctx context.Context) error {
	if a.stream == nil || a.db == nil {
		return errors.New("the actor is not held")
	}
	// As indexAlarm's: a hold that ended uploads nothing more.
	if err := a.node.opts.Cluster.Member.Owners.Check(a.hold); err != nil {
		return err
	}
	gen := strconv.FormatUint(a.stream.Generation(), 10)
	if _, err := a.db.HostExec(ctx, "INSERT OR REPLACE INTO "+metaTable+" (key, value) VALUES ('"+fenceKey+"', ?)", text(gen)); err != nil {
		return err
	}
	return a.ship(ctx)
}

// errNotCreated ends the stream of an actor an alarm delivery must not
// create.
var errNotCreated = errors.New("an alarm delivery does not create the actor")

// leaveEntries gives up an actor whose delivered time found nothing in the
// bucket, the hold having uploaded nothing (book ADR 0009, R2 and R4): its
// entries stay, since a joining node's first snapshot may still land and
// name one; nothing is uploaded, since fencing would create the actor in
// the bucket, empty, over that node's data; the hold is released at once,
// since held it would draw client requests here, whose first would create
// it empty the same way; and the time is delivered again after the longest
// backoff rather than on every sweep, unless the actor's own alarm is on
// the timer. A database the delivery created (openDB: nothing written in
// it yet, not even the host's tables, so no alarm of its own) goes
// (dropCopy).
func (a *actor) leaveEntries(ctx context.Context, delivered int64, created bool) {
	a.node.log.Info("an alarm delivered for an actor the bucket has nothing of: its entries stay, the actor is released", "actor", a.key, "at", delivered)
	rearm := created
	if created {
		a.dropCopy(ctx)
	} else {
		_, _, pending, err := alarm.Read(ctx, a.db)
		rearm = err == nil && !pending
		a.stream.Abandon(errNotCreated)
		a.giveUp(ctx)
	}
	if rearm {
		a.node.alarms.SetAt(a.key, a.class.name, a.addr.Name, time.UnixMilli(delivered), a.node.clock.Now().Add(alarm.RetryMax))
	}
}

// dropCopy gives up an actor and removes the database an alarm delivery
// created here, uploading nothing more of it: the delivery leaves the
// actor as it found it, not created here, nor resident for the access
// rules.
func (a *actor) dropCopy(ctx context.Context) {
	a.stream.Abandon(errNotCreated)
	a.giveUp(ctx)
	if err := a.node.storage.Remove(ctx, a.node.stateDir, a.addr); err != nil {
		a.node.log.Warn("removing the database an alarm delivery created", "actor", a.key, "err", err)
	}
	a.deleted.Store(true)
}
