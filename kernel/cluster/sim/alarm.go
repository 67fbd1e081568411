package sim

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/memdb"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The alarm index in the simulation (Config.Alarms; book ADR 0009, ADR
// 1048): the owners of the previous files keep each actor's alarm, a page
// of its database, and the real alarmindex functions keep the index in
// the bucket equal to it as a node does. An event that changes the alarm
// lists it (List, under the stream's generation) and records the entry in
// the same commit as its write, before the commit is shipped; once the
// commit is acknowledged the entry it replaced is removed
// (RemoveReplaced). The scheduler's sweep delivers entries it reads from
// the index to a random node: a delivered time the committed alarm no
// longer matches is stale, and its entries are removed (RemoveStale, with
// the owner_fence upload when the hold uploaded nothing yet, and the actor
// released when the bucket had nothing for it); a matching one fires, and
// its handler clears or moves the alarm. Nodes that start on a fresh data
// directory sometimes join with an actor of their own holding an alarm
// the index does not list (R4): the first hold lists it before the first
// upload, and a fault aimed at that upload (held at the bucket while the
// node is cut off) lets another node be handed the entry while the bucket
// has nothing for the actor. A process sometimes stalls between an
// acknowledgement and its cleanup, or between a stale delivery's checks
// and its cleanup's listing, as a paused process does: cut off until the
// pause ends, the other faults waiting, while the actor is woken on the
// other nodes and set to the stale time, so that a newer owner takes it
// and lists there before the cleanup lists (R3).
//
// Checked after every step that changed the bucket: the state the bucket's
// history holds for each actor (its restore plan's head) records a pending
// alarm only with an entry for that time, and that entry exists. Each
// shipped state is registered, by position, before its upload is sent,
// so the check knows what a state landing late records.

// alarmTimes are the due times alarms take: few, so that entries of
// different owners meet in one time's folder.
var alarmTimes = []int64{1_000, 2_000, 3_000}

// alarmState is an actor's alarm as a database holds it.
type alarmState struct {
	at      int64
	pending bool
	named   alarmindex.Indexed // alarm_indexed
}

func (s alarmState) String() string {
	if !s.pending {
		return "no alarm, naming " + s.named.String()
	}
	return fmt.Sprintf("alarm at %d, naming %v", s.at, s.named)
}

// alarmMark starts the page that holds the alarm.
const alarmMark = "alarm"

func alarmPage(s alarmState) []byte {
	p := make([]byte, memdb.PageSize)
	copy(p, fmt.Sprintf("%s\x00%t %d %s\n", alarmMark, s.pending, s.at, s.named.Encode()))
	return p
}

// alarmOf reads the alarm from a database's pages, and the page it is on
// (0: none yet, no alarm).
func alarmOf(pages [][]byte) (alarmState, uint32) {
	for i, p := range pages {
		rest, ok := bytes.CutPrefix(p, []byte(alarmMark+"\x00"))
		if !ok {
			continue
		}
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		f := strings.SplitN(string(line), " ", 3)
		var s alarmState
		s.pending = f[0] == "true"
		s.at, _ = strconv.ParseInt(f[1], 10, 64)
		var err error
		if s.named, err = alarmindex.ParseIndexed(f[2]); err != nil {
			panic(err)
		}
		return s, uint32(i + 1)
	}
	return alarmState{}, 0
}

// alarmPages is the commit that sets db's alarm to s.
func alarmPages(db *memdb.DB, s alarmState) map[uint32][]byte {
	pages := db.Pages()
	_, pgno := alarmOf(pages)
	if pgno == 0 {
		pgno = uint32(len(pages)) + 1
	}
	return map[uint32][]byte{pgno: alarmPage(s)}
}

// statePos is a state of an actor's, by the position of its history that
// holds it.
type statePos struct {
	a   ownership.Actor
	pos history.Pos
}

// register records the alarm the next upload of r's stream holds, before
// it is sent; w.mu is held.
func (w *world) register(x ownership.Actor, r *resident) {
	if w.cfg.Alarms {
		s, _ := alarmOf(r.db.Pages())
		w.states[statePos{x, history.Pos{TXID: r.st.Head().TXID + 1, Gen: r.hold.Generation}}] = s
	}
}

// state is p's view of the app's state, where the index lives.
func (p *process) state() bucket.Bucket { return bucket.Under(view{p}, simApp.StateRoot()) }

// attempt is a context bounded as one upload attempt of the node's.
func (p *process) attempt() (context.Context, context.CancelFunc) {
	return clock.WithTimeout(p.ctx, p.clk, replication.UploadAttempt)
}

// nextAlarm is what an event leaves as the alarm: mostly as it was, else
// a time or none. A time is favour when it is not 0: the time of a
// stale cleanup another process stalled in (R3's race).
func nextAlarm(rng *rand.Rand, cur alarmState, favour int64) alarmState {
	switch rng.IntN(4) {
	case 0:
		return alarmState{named: cur.named}
	case 1:
		at := alarmTimes[rng.IntN(len(alarmTimes))]
		if favour != 0 {
			at = favour
		}
		return alarmState{pending: true, at: at, named: cur.named}
	}
	return cur
}

// indexAlarm is the owner's step before an event's commit ships: a
// changed alarm is listed under the hold's generation, and the commit
// records the entry. It returns the commit's pages and the entry the
// commit replaces (none if unchanged); !ok: the index could not be brought
// in line, and the caller abandons the stream.
func (p *process) indexAlarm(x ownership.Actor, r *resident, next alarmState, nonces alarmindex.Nonces) (pages map[uint32][]byte, replaced alarmindex.Indexed, ok bool) {
	w := p.w
	named := next.named
	if next.pending == !named.None() && (!next.pending || named.At == next.at) {
		return nil, alarmindex.Indexed{}, true // unchanged: its entry stays
	}
	if p.member.Owners.Check(r.hold) != nil {
		return nil, alarmindex.Indexed{}, false
	}
	next.named = alarmindex.Indexed{}
	if next.pending {
		ctx, cancel := p.attempt()
		k, err := alarmindex.List(ctx, p.state(), replication.Actor(addr(x)), next.at, r.st.Generation(), nonces)
		cancel()
		if err != nil {
			w.note(p, "list %s's alarm at %d: failed", x, next.at)
			return nil, alarmindex.Indexed{}, false
		}
		next.named = k.Indexed()
		w.count(p, func(r *Result) { r.Listed++ })
	}
	return alarmPages(r.db, next), named, true
}

// count adds to the run's counts what p's goroutine did, unless p crashed
// or lost its lease (as note).
func (w *world) count(p *process, f func(*Result)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !p.dead && p.lost == nil {
		f(&w.res)
	}
}

// alarmEvent is an event that may change the alarm (next), with its write:
// listed, committed, shipped, and the replaced entry removed. It reports
// whether the stream goes on.
func (p *process) alarmEvent(x ownership.Actor, r *resident, next alarmState, rng *rand.Rand) bool {
	pages, replaced, ok := p.indexAlarm(x, r, next, alarmindex.NonceFunc(rng.Uint64))
	if !ok {
		r.st.Abandon(errors.New("the alarm could not be listed"))
		return false
	}
	if !p.write(x, r, pages) {
		return false
	}
	if replaced.None() {
		return true
	}
	cur, _ := alarmOf(r.db.Pages())
	p.stall(rng, stalled{})
	ctx, cancel := p.attempt()
	err := alarmindex.RemoveReplaced(ctx, p.state(), replication.Actor(addr(x)), replaced, cur.named, r.st.Generation())
	cancel()
	if err == nil {
		p.w.count(p, func(r *Result) { r.Replaced++ })
	}
	return true
}

// stall pauses p now and then, as a process stopped for seconds (a
// pause of its machine): the scheduler cuts it off meanwhile, so its lease
// is not renewed and may be fenced, and its hold taken, while the step it
// was about to take waits, unchecked, until the pause ends. The lease's
// next write after the pause loses it, but the step goes first: its
// requests are sent on waking. A stale cleanup (c.at not 0) stalls more
// often and longer, so that its actor can be taken and listed at its time
// meanwhile (R3).
func (p *process) stall(rng *rand.Rand, c stalled) {
	odds, lo, span := 8, 16000, 14000
	if c.at != 0 {
		odds, lo, span = 2, 25000, 15000
	}
	if rng.IntN(odds) != 0 {
		return
	}
	c.p = p
	x := pause{c, time.Duration(lo+rng.IntN(span)) * time.Millisecond, make(chan struct{})}
	p.w.mu.Lock()
	p.w.pauses = append(p.w.pauses, x)
	p.w.mu.Unlock()
	select {
	case <-x.over:
	case <-p.ctx.Done():
	}
}

// pause is a process stopped for a while, in c; over is closed when it
// goes on.
type pause struct {
	c    stalled
	d    time.Duration
	over chan struct{}
}

// stalled is a process stopped before a step: before a stale cleanup of
// x's entries at at (at not 0: until, the pause's end).
type stalled struct {
	p     *process
	x     ownership.Actor
	at    int64
	until time.Time
}

// stalledCleanup is a stale cleanup stalled now, if any; expired ones are
// dropped. The scheduler's alone.
func (w *world) stalledCleanup() (stalled, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cleanups = slices.DeleteFunc(w.cleanups, func(c stalled) bool { return !w.clk.Now().Before(c.until) })
	if len(w.cleanups) == 0 {
		return stalled{}, false
	}
	return w.cleanups[0], true
}

// favour is the time of a stale cleanup of x's that another process than
// p is stalled in (0: none): an event of p's sets its alarm there, as an
// app setting the same time again does, so the cleanup, once it wakes,
// lists a newer owner's entry (R3).
func (w *world) favour(p *process, x ownership.Actor) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.cleanups {
		if c.x == x && c.p.n != p.n && w.clk.Now().Before(c.until) {
			return c.at
		}
	}
	return 0
}

// pauseAll cuts off the processes that stalled in the last step, each
// until its pause ends.
func (w *world) pauseAll() {
	w.mu.Lock()
	ps := w.pauses
	w.pauses = nil
	w.mu.Unlock()
	slices.SortStableFunc(ps, func(a, b pause) int { return cmp.Compare(a.c.p.index, b.c.p.index) })
	for _, x := range ps {
		if slices.ContainsFunc(w.procs, func(p *process) bool { return p.cut && !p.zombie }) {
			// Two nodes of three away, nobody would take the actor; or
			// the node is cut off already: the step goes on at once.
			close(x.over)
			continue
		}
		p := x.c.p
		p.cut, p.paused = true, true
		w.res.Pauses++
		w.tracef("%s pauses for %v", p, x.d)
		w.after(x.d, func() {
			p.paused = false
			p.heal()
			close(x.over)
		})
		if x.c.at != 0 {
			x.c.until = w.clk.Now().Add(x.d)
			w.mu.Lock()
			w.cleanups = append(w.cleanups, x.c)
			w.mu.Unlock()
		}
	}
}

// staleOutcome names a RemoveStale's outcome for the trace.
func staleOutcome(err error) string {
	for _, e := range []error{alarmindex.ErrNotReplicated, alarmindex.ErrNotFenced, alarmindex.ErrBucketHadNothing} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "ok"
	}
	return "failed"
}

// removeStale is RemoveStale, after a stall now and then once the hold
// is fenced (before, it refuses without a request).
func (p *process) removeStale(x ownership.Actor, s alarmindex.Stale, rng *rand.Rand) (alarmindex.Removal, error) {
	if s.Fenced {
		p.stall(rng, stalled{x: x, at: s.At})
	}
	ctx, cancel := p.attempt()
	defer cancel()
	return alarmindex.RemoveStale(ctx, p.state(), s)
}

// firstListing is R4, at a hold's start: when the bucket had nothing for
// the actor and the local database (a joining node's own) holds an alarm
// no entry lists, the alarm is listed and recorded before anything is
// uploaded. !ok: it could not be, and the hold is given up with nothing
// uploaded.
func (p *process) firstListing(x ownership.Actor, r *resident, rng *rand.Rand) bool {
	s, _ := alarmOf(r.db.Pages())
	if r.st.Head().TXID != 0 || !s.pending || !s.named.None() {
		return true
	}
	if p.w.cfg.FirstUploadBeforeEntry {
		// Planted: the snapshot first, the entry after it.
		if !p.write(x, r, nil) {
			return false
		}
	}
	pages, _, ok := p.indexAlarm(x, r, s, alarmindex.NonceFunc(rng.Uint64))
	if ok {
		ok = r.db.Commit(0, pages) == nil
	}
	if !ok {
		r.st.Abandon(errors.New("the alarm could not be listed"))
		return false
	}
	r.unshipped = true
	p.w.count(p, func(r *Result) { r.FirstListings++ })
	return true
}

// deliver is the alarm event for an entry at at: the alarm fires if the
// committed alarm is due then (its handler clears or moves it); else the
// time is stale and its entries are removed as the rules allow. It
// reports whether the session goes on holding the actor.
func (p *process) deliver(x ownership.Actor, r *resident, at int64, rng *rand.Rand) bool {
	w := p.w
	cur, _ := alarmOf(r.db.Pages())
	if cur.pending && cur.at == at {
		w.note(p, "%s's alarm at %d fires", x, at)
		next := nextAlarm(rng, alarmState{named: cur.named}, w.favour(p, x))
		return p.alarmEvent(x, r, next, rng)
	}
	head := r.st.Head()
	s := alarmindex.Stale{Actor: replication.Actor(addr(x)), At: at, Named: cur.named,
		Replicated: !r.unshipped && r.st.Err() == nil, Gen: r.st.Generation(),
		Fenced: head.TXID != 0 && head.Gen == r.st.Generation(), BucketHadNothing: head.TXID == 0}
	rm, err := p.removeStale(x, s, rng)
	if errors.Is(err, alarmindex.ErrNotFenced) {
		// owner_fence: one upload of its own ends the history, then again.
		if !p.write(x, r, nil) {
			return false
		}
		w.count(p, func(r *Result) { r.OwnerFences++ })
		s.Fenced = true
		rm, err = p.removeStale(x, s, rng)
	}
	w.note(p, "%s: stale %d naming %v: %d removed, %d newer kept: %v", x, at, cur.named, len(rm.Removed), len(rm.Newer), staleOutcome(err))
	w.count(p, func(r *Result) {
		r.StaleRemoved, r.NewerKept = r.StaleRemoved+len(rm.Removed), r.NewerKept+len(rm.Newer)
	})
	if errors.Is(err, alarmindex.ErrBucketHadNothing) {
		w.count(p, func(r *Result) { r.HadNothing++ })
		return false // released at once: its first request would create the actor empty
	}
	return true
}

// joinData gives a node starting on a fresh data directory, now and then,
// an actor of its own that the bucket has never had, with an alarm no
// entry lists: it ran alone before joining.
func (n *node) joinData() {
	w := n.w
	if !w.cfg.Alarms || w.rng.IntN(2) != 0 {
		return
	}
	x := ownership.Actor{Tenant: "t", Class: "c", Name: fmt.Sprintf("j%d", len(w.joins))}
	db, err := n.disk.Open(context.Background(), "data", addr(x), storage.Options{Replication: true})
	if err != nil {
		panic(err)
	}
	s := alarmState{pending: true, at: alarmTimes[w.rng.IntN(len(alarmTimes))]}
	if err := db.(*memdb.DB).Commit(0, map[uint32][]byte{1: writePage(x.Name + " alone"), 2: alarmPage(s)}); err != nil {
		panic(err)
	}
	db.Close()
	w.joins = append(w.joins, join{x, n.disk})
	w.tracef("%s joins with %s: %v", n.id, x, s)
}

// join is an actor a node brought when it joined: its data directory.
type join struct {
	a    ownership.Actor
	disk *memdb.Driver
}

// joinWake is a wake of a joining node's actor on the node whose data
// directory holds it (nil: none to wake).
func (w *world) joinWake() (*process, ownership.Actor) {
	if len(w.joins) == 0 {
		return nil, ownership.Actor{}
	}
	j := w.joins[w.rng.IntN(len(w.joins))]
	for i := len(w.procs) - 1; i >= 0; i-- {
		if p := w.procs[i]; p.disk == j.disk && p == p.n.cur {
			return p, j.a
		}
	}
	return nil, ownership.Actor{}
}

// sweepPick is the scheduler's sweep: an entry read from the index, its
// actor and time (ok false: none).
func (w *world) sweepPick() (ownership.Actor, int64, bool) {
	entries, err := bucket.ListAll(context.Background(), w.store, simApp.StateRoot()+alarmindex.Prefix)
	if err != nil || len(entries) == 0 {
		return ownership.Actor{}, 0, false
	}
	e := entries[w.rng.IntN(len(entries))]
	k, err := alarmindex.ParseKey(strings.TrimPrefix(e.Key, simApp.StateRoot()))
	if err != nil {
		w.violation("the index holds %s: %v", e.Key, err)
		return ownership.Actor{}, 0, false
	}
	a, _, err := k.Actor()
	if err != nil {
		panic(err)
	}
	return ownership.Actor{Tenant: a.Tenant, Class: a.Class, Name: a.Name}, k.At, true
}

// aimed is a fault aimed at an upload of history: held at the bucket,
// landing after a takeover could have handed the actor to another node,
// while the node is cut off (its lease renews no more, so it is fenced and
// the actor can be taken). Half of a joining node's first uploads meet
// it, which lets another node be handed the alarm's entry while the bucket
// has nothing for the actor, and a few others, which makes an earlier
// owner's upload land after a new owner restored (a late commit).
func (w *world) aimed(r *request) bool {
	if !w.cfg.Alarms || r.op != opPut || w.stopping || w.pausing() {
		return false
	}
	k, ok := strings.CutPrefix(r.key, simApp.StateRoot()+"actors/")
	if !ok || !strings.Contains(k, "/wal/") {
		return false
	}
	parts := strings.SplitN(k, "/", 4)
	rel, err := history.ParseRel(parts[3])
	if err != nil {
		return false
	}
	first := false
	for _, j := range w.joins {
		first = first || rel.TXID == 1 && j.a.Name == parts[2] && j.disk == r.p.disk
	}
	if first && w.rng.IntN(2) != 0 || !first && w.rng.IntN(25) != 0 {
		return false
	}
	cut := w.ms(20000, 40000)
	r.p.cut = true
	w.res.Cuts++
	w.res.Aimed++
	w.tracef("%s cut off for %v: its upload %s is held", r.p, cut, r)
	p := r.p
	w.after(cut, func() { p.heal() })
	return true
}

// checkAlarms is the invariant, after a step that changed the bucket: the
// state each actor's history holds records a pending alarm only with its
// entry, and the entry exists.
func (w *world) checkAlarms() {
	if !w.cfg.Alarms || !w.changed {
		return
	}
	w.changed = false
	w.res.AlarmChecks++
	state := bucket.Under(w.store, simApp.StateRoot())
	ctx := context.Background()
	for _, x := range w.allActors() {
		prefix, err := history.Prefix(replication.Actor(addr(x)))
		if err != nil {
			panic(err)
		}
		entries, err := bucket.ListAll(ctx, state, prefix)
		if err != nil {
			panic(err)
		}
		l, err := history.ParseListing(prefix, entries)
		if err != nil {
			w.violation("%s's history: %v", x, err)
			continue
		}
		plan, err := history.PlanRestore(l)
		if err != nil || plan.Empty() {
			continue // a broken history is replication's violation
		}
		w.mu.Lock()
		s, known := w.states[statePos{x, plan.Head}]
		w.mu.Unlock()
		switch {
		case !known:
			w.violation("%s's head (%v) holds a state no owner registered", x, plan.Head)
		case !s.pending:
		case s.named.None() || s.named.At != s.at:
			w.violation("%s's committed alarm names no entry for it: %v (head %v)", x, s, plan.Head)
		default:
			k, err := s.named.Key(replication.Actor(addr(x)))
			if err != nil {
				panic(err)
			}
			obj, err := state.Get(ctx, k.String(), bucket.GetOptions{})
			if err != nil {
				w.violation("%s's committed alarm's named entry is missing: %v (head %v): %v", x, s, plan.Head, err)
				continue
			}
			obj.Body.Close()
		}
	}
}

// allActors is the workload's actors and those joining nodes brought.
func (w *world) allActors() []ownership.Actor {
	xs := append([]ownership.Actor(nil), w.actors...)
	for _, j := range w.joins {
		xs = append(xs, j.a)
	}
	return xs
}
