package sim

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/memdb"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
)

// Replication in the simulation: every hold starts with the real
// replication.Open (a restore unless the node's local database is the
// bucket's head), every actor event commits one page naming the write and
// ships it with the real Stream.Ship under the acknowledgement rule, then
// Stream.Snapshot (periodic snapshots and, after them, collection passes);
// hibernation is Stream.Close. The databases are memdb's, one data
// directory per node (kept or lost by a crash). Checked: a write
// acknowledged by a generation is in the database every restore of a
// higher generation starts from, and in a last restore after the run;
// no restore finds the history broken.

// resident is an actor open on a process: its hold, stream and database.
type resident struct {
	hold    ownership.Hold
	st      *replication.Stream
	db      *memdb.DB
	n       int      // writes this hold made
	pending []string // committed, not acknowledged yet
	// unshipped: something is committed that no acknowledged upload
	// holds (a joining node's alarm listed before its first upload).
	unshipped bool
}

type ack struct {
	p   *process
	a   ownership.Actor
	gen uint64
	ids []string
	key history.Key
}

type restored struct {
	p     *process
	a     ownership.Actor
	gen   uint64
	ids   map[string]bool
	final bool
}

func addr(a ownership.Actor) abi.Address {
	return abi.Address{Tenant: a.Tenant, Class: a.Class, Name: a.Name}
}

// writePage is the page a write commits: its id, a zero byte, then bytes
// drawn from the id's hash. Pages of ids alone differing in one digit were
// too regular: LTX's database checksum, an XOR of CRC-64s, is linear, and
// eight such pages XOR to nothing, so a database without them had the
// same checksum as one with them, and a stale local database passed for
// the head (the simulation found this; real pages are not that regular).
func writePage(id string) []byte {
	p := make([]byte, 0, memdb.PageSize)
	p = append(append(p, id...), 0)
	for seed := sha256.Sum256([]byte(id)); len(p) < memdb.PageSize; seed = sha256.Sum256(seed[:]) {
		p = append(p, seed[:min(len(seed), memdb.PageSize-len(p))]...)
	}
	return p
}

// writes reads the write ids a database holds.
func writes(pages [][]byte) map[string]bool {
	ids := map[string]bool{}
	for _, p := range pages {
		if i := bytes.IndexByte(p, 0); i > 0 && string(p[:i]) != alarmMark {
			ids[string(p[:i])] = true
		}
	}
	return ids
}

func (p *process) replicas() *replication.Replicas {
	r, err := replication.New(replication.Config{
		Bucket: bucket.Under(view{p}, simApp.StateRoot()), Clock: p.clk, Driver: p.disk, Root: "data", TempDir: p.w.cfg.TempDir,
		Retention: 0, // collect as soon as the rule allows
	})
	if err != nil {
		panic(err)
	}
	return r
}

// open starts a hold's replication: Open (a restore), reported to the
// scheduler with what the database holds.
func (p *process) open(x ownership.Actor, h ownership.Hold) (*resident, error) {
	w, m := p.w, p.member
	valid := replication.HoldValid(m.Owners, h)
	if w.cfg.AckLateUploads {
		valid = func() bool { return true } // planted: no hold check after an upload
	}
	st, db, err := p.repl.Open(p.ctx, addr(x), h.Generation, valid)
	if err != nil {
		if errors.Is(err, history.ErrBroken) {
			w.mu.Lock()
			w.broken = append(w.broken, fmt.Sprintf("%s: restore of %s at generation %d: %v", p, x, h.Generation, err))
			w.mu.Unlock()
		}
		return nil, err
	}
	mdb := db.(*memdb.DB)
	w.mu.Lock()
	w.restores = append(w.restores, restored{p: p, a: x, gen: h.Generation, ids: writes(mdb.Pages())})
	w.mu.Unlock()
	return &resident{hold: h, st: st, db: mdb}, nil
}

// event is one actor event: its write, and with Config.Alarms a change of
// its alarm kept in the index. It reports whether the stream goes on.
func (p *process) event(x ownership.Actor, r *resident, rng *rand.Rand) bool {
	if !p.w.cfg.Alarms {
		return p.write(x, r, nil)
	}
	cur, _ := alarmOf(r.db.Pages())
	return p.alarmEvent(x, r, nextAlarm(rng, cur, p.w.favour(p, x)), rng)
}

// write is one actor event's write: a page naming it, committed with more
// (an alarm's pages) and shipped; acknowledged writes are reported. It
// reports whether the stream goes on.
func (p *process) write(x ownership.Actor, r *resident, more map[uint32][]byte) bool {
	w := p.w
	id := fmt.Sprintf("%s g%d w%d", x.Name, r.hold.Generation, r.n)
	r.n++
	pages := map[uint32][]byte{}
	next := uint32(len(r.db.Pages())) + 1
	for pgno, data := range more {
		pages[pgno] = data
		next = max(next, pgno+1)
	}
	pages[next] = writePage(id)
	if err := r.db.Commit(0, pages); err != nil {
		return false
	}
	r.pending = append(r.pending, id)
	w.mu.Lock()
	w.register(x, r)
	w.mu.Unlock()
	sh, err := r.st.Ship(p.ctx)
	if err != nil {
		w.note(p, "ship %s: %v", x, errKind(err))
		return false
	}
	if sh.Key.TXID != 0 {
		w.mu.Lock()
		w.acks = append(w.acks, ack{p, x, r.hold.Generation, r.pending, sh.Key})
		w.mu.Unlock()
		r.pending, r.unshipped = nil, false
	}
	if ok, err := r.st.Snapshot(p.ctx); err != nil {
		w.note(p, "snapshot %s: %v", x, errKind(err))
		return false
	} else if ok {
		w.mu.Lock()
		w.res.Snapshots++
		w.mu.Unlock()
	}
	return true
}

// close ends a resident's stream (hibernation ships what is left).
func (p *process) close(x ownership.Actor, r *resident) {
	p.w.mu.Lock()
	p.w.register(x, r)
	p.w.mu.Unlock()
	r.st.Close(p.ctx) //nolint:errcheck // the next owner's restore decides
	r.db.Close()
}

func errKind(err error) string {
	for _, e := range []error{replication.ErrLate, replication.ErrUnknown, replication.ErrExists, replication.ErrDone} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "failed"
}

// checkReplication is the scheduler's check of what the last step
// reported: every acknowledged write of a generation is in every restore
// of a higher one, whichever was reported first.
func (w *world) checkReplication() {
	w.mu.Lock()
	acks, rs, broken := w.acks, w.restores, w.broken
	w.acks, w.restores, w.broken = nil, nil, nil
	w.mu.Unlock()
	for _, b := range broken {
		w.violation("history broken: %s", b)
	}
	slices.SortStableFunc(acks, func(a, b ack) int {
		return cmp.Or(cmp.Compare(a.p.index, b.p.index), strings.Compare(a.a.Key(), b.a.Key()))
	})
	slices.SortStableFunc(rs, func(a, b restored) int {
		return cmp.Or(cmp.Compare(a.p.index, b.p.index), strings.Compare(a.a.Key(), b.a.Key()))
	})
	for _, a := range acks {
		w.res.Acked += len(a.ids)
		w.tracef("%s: %s acknowledged %v", a.p, a.key, a.ids)
		for _, r := range w.restoredBy[a.a] {
			w.lacks(r, a)
		}
		w.acked[a.a] = append(w.acked[a.a], a)
	}
	for _, r := range rs {
		w.res.Restores++
		w.tracef("%s restored %s at generation %d: %d writes", r.p, r.a, r.gen, len(r.ids))
		for _, a := range w.acked[r.a] {
			w.lacks(r, a)
		}
		w.restoredBy[r.a] = append(w.restoredBy[r.a], r)
	}
}

// lacks reports a restore of a higher generation than an acknowledgement
// that does not hold its writes.
func (w *world) lacks(r restored, a ack) {
	if r.gen <= a.gen {
		return
	}
	for _, id := range a.ids {
		if !r.ids[id] {
			who := fmt.Sprintf("%s's restore at generation %d", r.p, r.gen)
			if r.final {
				who = "the last restore after the run"
			}
			w.violation("%s lacks write %q of %s, acknowledged by %s at generation %d (%s)", who, id, a.a, a.p, a.gen, a.key)
			return
		}
	}
}

// landed counts uploads that took effect after their hold ended (late
// uploads) and objects collected.
func (w *world) landed(r *request, res result) {
	key, ok := strings.CutPrefix(r.key, simApp.StateRoot()+"actors/")
	if res.err == nil && (r.op == opPut || r.op == opDelete) && strings.HasPrefix(r.key, simApp.StateRoot()) {
		w.changed = true // the alarm invariant is checked again
	}
	if res.err != nil || !ok {
		return
	}
	parts := strings.SplitN("actors/"+key, "/", 5)
	if len(parts) != 5 {
		return
	}
	if r.op == opDelete {
		w.res.Collected++
		return
	}
	k, err := history.ParseRel(parts[4])
	if r.op != opPut || err != nil {
		return
	}
	x := ownership.Actor{Tenant: parts[1], Class: parts[2], Name: parts[3]}
	w.mu.Lock()
	m, dead := r.p.member, r.p.dead
	w.mu.Unlock()
	if m != nil && !dead {
		if h, ok := m.Owners.Owns(x); ok && h.Generation == k.Gen {
			return
		}
	}
	w.res.LateUploads++
	w.tracef("late upload %s: generation %d's hold has ended", r.key, k.Gen)
}

// finalRestore restores every actor once more after the run, straight
// from the store, as a last owner would: each acknowledged write must be
// there, and no history broken.
func (w *world) finalRestore() {
	r, err := replication.New(replication.Config{
		Bucket: bucket.Under(w.store, simApp.StateRoot()), Clock: w.clk, Driver: memdb.New(), Root: "data", TempDir: w.cfg.TempDir,
	})
	if err != nil {
		panic(err)
	}
	for _, x := range w.actors {
		_, db, err := r.Open(context.Background(), addr(x), 1<<62, func() bool { return true })
		if err != nil {
			w.violation("the last restore of %s: %v", x, err)
			continue
		}
		ids := writes(db.(*memdb.DB).Pages())
		db.Close()
		fr := restored{a: x, gen: 1 << 62, ids: ids, final: true}
		for _, a := range w.acked[x] {
			w.lacks(fr, a)
		}
		w.tracef("last restore of %s: %d writes", x, len(ids))
	}
}
