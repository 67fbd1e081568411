package node

import (
	"context"
	"errors"

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
	var current alarmindex.Indexed // none, after a delete (its database is closed)
	if a.db != nil {
		var err error
		if current, err = readIndexed(ctx, a.db); err != nil {
			a.node.log.Warn("reading the alarm's entry: the entries it replaced stay", "actor", a.key, "err", err)
			return
		}
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
