package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/memdb"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
)

// node is a node id; each start runs a new process (instance) under it.
type node struct {
	w    *world
	id   string
	cur  *process      // the newest process
	disk *memdb.Driver // its data directory
	// fresh: its data directory is new since the last start (a node may
	// join with data of its own, alarm.go).
	fresh bool
}

// process is one instance of a node: its own clock (skewed), its own view
// of the bucket, the real cluster.Member once it joined.
type process struct {
	w        *world
	n        *node
	index    int
	instance string
	skew     time.Duration
	clk      clock.Clock
	disk     *memdb.Driver
	repl     *replication.Replicas
	ctx      context.Context    // its work: joining, sessions, the listing
	cancel   context.CancelFunc // ends the work
	quit     chan struct{}      // closed when main is to stop (or only wind down, crashed)
	lostCh   chan struct{}      // closed by the lease's Lost

	// The scheduler's alone:
	cut      bool // partitioned from the bucket
	paused   bool // stopped (alarm.go's stall): cut off until the pause ends
	zombie   bool // cut off while a successor starts
	handled  bool // its exit was seen
	listing  bool // its listing runs
	quitting bool // quit is closed

	// Under w.mu:
	dead     bool // crashed: its requests are refused, its replies lost
	stopping bool
	member   *cluster.Member
	lost     error
	joinErr  error
	ended    bool
	busy     map[ownership.Actor]bool
	resident map[ownership.Actor]*resident
	sockets  map[ownership.Actor]int // open sockets of each actor (sockets.go)
	draining bool
}

func (p *process) String() string { return p.n.id + "/" + p.instance }

// note is what a process goroutine reports; the scheduler traces them in
// an order of their content.
type note struct {
	proc int
	text string
}

type newHold struct {
	p *process
	h ownership.Hold
}

// start runs a new process under n: a fresh instance, its clock skewed
// within max_skew, joining as a server does.
func (n *node) start() {
	w := n.w
	if w.stopping {
		return
	}
	p := &process{w: w, n: n, index: len(w.procs), instance: fmt.Sprintf("p%d", len(w.procs)), disk: n.disk,
		busy: map[ownership.Actor]bool{}, resident: map[ownership.Actor]*resident{}, sockets: map[ownership.Actor]int{}}
	max := w.settings.MaxSkew
	switch w.rng.IntN(3) {
	case 0:
		p.skew = max
	case 1:
		p.skew = -max
	default:
		p.skew = time.Duration(w.rng.Int64N(int64(2*max+1))) - max
	}
	p.skew = p.skew.Truncate(time.Millisecond)
	p.clk = simtest.Skewed{Clock: w.clk, D: p.skew}
	p.repl = p.replicas()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.quit, p.lostCh = make(chan struct{}), make(chan struct{})
	w.procs = append(w.procs, p)
	if n.fresh {
		n.fresh = false
		n.joinData()
	}
	if n.cur != nil {
		w.res.Restarts++
	}
	n.cur = p
	w.tracef("%s starts, clock %+v", p, p.skew)
	w.spawn(p.main)
}

// main is the process: join (probe, start check, first lease write), and
// at its end a clean stop (or, crashed, the same calls failing against a
// bucket it no longer reaches, only to end its goroutines). Its listing and
// its sessions are started by the scheduler, each alone in its step.
func (p *process) main() {
	w := p.w
	m, err := cluster.Join(p.ctx, cluster.Config{
		Bucket: view{p}, App: simApp, Clock: p.clk, Settings: w.settings, NodeID: p.n.id, Instance: p.instance,
		Info:   nodelease.Info{Advertise: "http://" + p.n.id},
		Logger: slog.New(slog.DiscardHandler),
		Fenced: func(peer string) {
			w.mu.Lock()
			w.res.Fences++
			w.mu.Unlock()
			w.note(p, "fenced %s", peer)
		},
		Lapsed: func(int) { // every socket closes with 1012 at a lapse
			w.mu.Lock()
			clear(p.sockets)
			w.mu.Unlock()
		},
		Lost: func(err error) {
			w.mu.Lock()
			p.lost = err
			w.mu.Unlock()
			p.cancel()
			close(p.lostCh)
		},
	})
	if err != nil {
		w.mu.Lock()
		p.joinErr = err
		p.ended = true
		w.mu.Unlock()
		return
	}
	w.mu.Lock()
	p.member = m
	w.mu.Unlock()
	select {
	case <-p.quit:
		// A clean stop closes every stream (shipping what is left), then
		// releases every hold and the lease.
		w.mu.Lock()
		dead, rs := p.dead, p.resident
		p.resident = map[ownership.Actor]*resident{}
		w.mu.Unlock()
		if !dead {
			for _, x := range slices.SortedFunc(maps.Keys(rs), func(a, b ownership.Actor) int { return strings.Compare(a.Key(), b.Key()) }) {
				if r := rs[x]; r != nil {
					w.mu.Lock()
					w.register(x, r)
					w.mu.Unlock()
					r.st.Close(context.Background()) //nolint:errcheck // the next owner's restore decides
					r.db.Close()
				}
			}
		}
		m.Leave(context.Background()) //nolint:errcheck // a crashed process's stop fails, as it should
	case <-p.lostCh:
	}
	w.mu.Lock()
	p.ended = true
	w.mu.Unlock()
}

// note records what p's goroutine saw, unless p crashed or lost its
// lease: its goroutines then only wind down, side by side, and what they
// see is no part of the run.
func (w *world) note(p *process, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.dead || p.lost != nil {
		return
	}
	w.notes = append(w.notes, note{p.index, p.String() + " " + fmt.Sprintf(format, args...)})
}

// ranEvent is an actor event that passed the hold check on a process.
type ranEvent struct {
	p   *process
	a   ownership.Actor
	gen uint64
}

// ran records an event about to run under p's hold of x at generation
// gen, unless p crashed or lost its lease (as note).
func (w *world) ran(p *process, x ownership.Actor, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !p.dead && p.lost == nil {
		w.ranEvents = append(w.ranEvents, ranEvent{p, x, gen})
	}
}

// session is an actor woken on p by a request: its hold and stream kept
// from an earlier session, or a new hold acquired and restored; a few
// events, each a write shipped while owning it; then hibernation (the
// stream closed, the hold released) or the actor stays resident.
func (p *process) session(x ownership.Actor, seed uint64, deliver int64) {
	w := p.w
	defer func() {
		w.mu.Lock()
		p.busy[x] = false
		w.mu.Unlock()
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	m := p.member
	w.mu.Lock()
	r := p.resident[x]
	w.mu.Unlock()
	// The hold check comes before each event, as on a node (the actor's
	// event gate): a resident whose hold ended is retired and the actor
	// taken afresh.
	if r != nil && (m.Owners.Check(r.hold) != nil || r.st.Err() != nil) {
		p.retire(x, r)
		r = nil
	}
	if r == nil && (w.cfg.SocketHome || w.cfg.Moves) && deliver == 0 && p.relay(x, seed) {
		return
	}
	if r == nil {
		h, err := m.Owners.Acquire(p.ctx, x)
		if err != nil {
			var held *ownership.HeldError
			switch {
			case errors.As(err, &held):
				w.note(p, "acquire %s: held by %s/%s at %d", x, held.Record.Node, held.Record.Instance, held.Record.Generation)
			case errors.Is(err, ownership.ErrUnresolved):
				w.note(p, "acquire %s: unresolved", x)
			default:
				w.note(p, "acquire %s: failed", x)
			}
			return
		}
		w.mu.Lock()
		w.newHolds = append(w.newHolds, newHold{p, h})
		if h.Unparked {
			w.res.HomeWakes++
		}
		w.mu.Unlock()
		if r, err = p.open(x, h); err != nil {
			w.note(p, "open %s at generation %d: %v", x, h.Generation, err)
			m.Owners.Release(p.ctx, h) //nolint:errcheck // a failed restore gives the hold up; pending is kept
			return
		}
		w.mu.Lock()
		p.resident[x] = r
		w.mu.Unlock()
		if w.cfg.Alarms && !p.firstListing(x, r, rng) {
			p.retire(x, r)
			return
		}
	}
	if deliver > 0 && !p.deliver(x, r, deliver, rng) {
		p.retire(x, r)
		return
	}
	owned := true
	for range 1 + rng.IntN(16) {
		if clock.Sleep(p.ctx, p.clk, time.Duration(10+rng.IntN(150))*time.Millisecond) != nil {
			return
		}
		if m.Owners.Check(r.hold) != nil {
			w.note(p, "%s: no longer owned at generation %d", x, r.hold.Generation)
			owned = false
			break
		}
		w.ran(p, x, r.hold.Generation)
		if !p.event(x, r, rng) {
			owned = false // the stream ended: stop acting as owner
			break
		}
		w.mu.Lock()
		w.res.Events++
		w.mu.Unlock()
	}
	if !owned {
		p.retire(x, r)
	} else if p.openSocket(x, rng); rng.IntN(10) < 6 {
		p.hibernate(x, r)
	}
}

// retire ends a resident: its stream closed, its database closed, its
// hold released.
func (p *process) retire(x ownership.Actor, r *resident) {
	w := p.w
	w.mu.Lock()
	if p.resident[x] == r {
		delete(p.resident, x)
	}
	w.mu.Unlock()
	p.close(x, r)
	p.release(x, r)
}

// release releases a closed resident's hold (in the moves' workload, now
// and then to a successor: moves.go).
func (p *process) release(x ownership.Actor, r *resident) {
	w := p.w
	next := p.successor(r.hold)
	err := p.member.Owners.ReleaseTo(p.ctx, r.hold, next)
	w.note(p, "release %s generation %d to %q: pending %v", x, r.hold.Generation, next.Node, err != nil)
	p.failedTake(x, r.hold, next)
}

// wake is the workload: now and then an actor is woken on a process of a
// node (its newest, or one left running cut off).
func (w *world) wake() {
	if w.stopping {
		return
	}
	w.after(w.wakeGap(), w.wake)
	if w.cfg.SocketHome && w.rng.IntN(15) == 0 {
		w.closeSocket()
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	x := w.actors[w.rng.IntN(len(w.actors))]
	seed := w.rng.Uint64()
	var deliver int64
	var joining *process
	c, stalled := w.stalledCleanup()
	switch {
	case stalled && w.rng.IntN(2) == 0:
		// R3's race: the actor a paused stale cleanup concerns, woken on
		// another node, which takes it once the paused one is fenced.
		i := slices.Index(w.nodes, c.p.n)
		n, x = w.nodes[(i+1+w.rng.IntN(len(w.nodes)-1))%len(w.nodes)], c.x
	case w.cfg.Alarms:
		switch w.rng.IntN(4) {
		case 0:
			joining, x = w.joinWake()
		case 1:
			if a, at, ok := w.sweepPick(); ok {
				x, deliver = a, at
			}
		case 2:
			// A node's timer firing for a time the alarm may no longer
			// have (a stale registration).
			deliver = alarmTimes[w.rng.IntN(len(alarmTimes))]
		}
	}
	var ps []*process
	for _, p := range w.procs {
		if p.n == n {
			ps = append(ps, p)
		}
	}
	var p *process
	switch {
	case joining != nil:
		p = joining
	case x.Name == "" || len(ps) == 0:
		return
	case len(ps) > 1 && ps[len(ps)-2].zombie && w.rng.IntN(2) == 0:
		p = ps[len(ps)-2]
	default:
		p = ps[len(ps)-1]
	}
	w.mu.Lock()
	ok := p.member != nil && !p.dead && !p.stopping && p.lost == nil && !p.busy[x]
	if ok {
		p.busy[x] = true
	}
	w.mu.Unlock()
	if ok {
		w.tracef("wake %s on %s (delivering %d)", x, p, deliver)
		w.spawn(func() { p.session(x, seed, deliver) })
	}
}

// episode is the next fault of a node's newest process: a crash (its data
// directory kept or lost) and a restart, a partition, a successor started
// while it runs on cut off (a zombie), or a clean stop and a restart.
func (n *node) episode() {
	w := n.w
	if w.stopping {
		return
	}
	p := n.cur
	w.mu.Lock()
	ready := p != nil && p.member != nil && !p.dead && !p.stopping && p.lost == nil
	w.mu.Unlock()
	if !ready || w.pausing() {
		w.after(w.faultGap(), n.episode)
		return
	}
	var length time.Duration
	switch x := w.rng.IntN(20); {
	case x < 7:
		length = w.ms(500, 20500)
		kept := w.rng.IntN(2) == 0
		p.crash(kept)
		if !kept {
			n.disk, n.fresh = memdb.New(), true
		}
		w.after(length, n.start)
	case x < 14:
		length = w.ms(1000, 26000)
		p.cut = true
		w.res.Cuts++
		w.tracef("%s cut off for %v", p, length)
		w.after(length, func() { p.heal() })
	case x < 16:
		length = w.ms(20000, 40000)
		p.cut, p.zombie = true, true
		w.res.Zombies++
		w.tracef("%s cut off for %v, its successor starts on another disk", p, length)
		n.disk, n.fresh = memdb.New(), true
		w.after(w.ms(500, 3500), n.start)
		w.after(length, func() { p.heal() })
	case w.cfg.SocketHome && x < 18:
		length = w.ms(2000, 20000)
		p.drain(length)
	default:
		length = w.ms(500, 5500)
		w.tracef("%s stops", p)
		p.leave()
		w.after(length, n.start)
	}
	w.after(length+w.faultGap(), n.episode)
}

// pausing reports whether a process is paused (alarm.go's stall): the
// other faults wait, so that the nodes left can take over meanwhile.
func (w *world) pausing() bool {
	return slices.ContainsFunc(w.procs, func(p *process) bool { return p.paused })
}

func (p *process) heal() {
	if p.cut && !p.paused {
		p.cut = false
		p.w.tracef("%s reconnects", p)
	}
}

// crash ends p at once: its requests refused, replies to it lost; what it
// had in flight still lands. Its goroutines wind down against the refusals.
func (p *process) crash(dataKept bool) {
	w := p.w
	w.mu.Lock()
	p.dead = true
	w.mu.Unlock()
	w.res.Crashes++
	w.tracef("%s crashes (data kept %v)", p, dataKept)
	p.disk.CloseAll()
	p.cancel()
	p.end()
}

// leave is a clean stop: no actor is woken any more; once the sessions
// running have ended (reap sees it), the work is cancelled and main closes
// every stream, releases every hold, then the lease, as a server's drain
// does.
func (p *process) leave() {
	w := p.w
	w.mu.Lock()
	p.stopping = true
	w.mu.Unlock()
}

// end closes quit once.
func (p *process) end() {
	if !p.quitting {
		p.quitting = true
		close(p.quit)
	}
}

// reap is the scheduler's look at what the goroutines of the last step
// reported: notes traced in order, new holds checked, a joined process's
// listing started, a drained stop's main woken (it reports whether it
// started or woke anything), exits seen (a lost
// lease or a refused start: a supervisor restarts the process).
func (w *world) reap() (spawned bool) {
	w.mu.Lock()
	notes, holds, ran, parks := w.notes, w.newHolds, w.ranEvents, w.parks
	w.notes, w.newHolds, w.ranEvents, w.parks = nil, nil, nil, nil
	w.mu.Unlock()
	slices.SortStableFunc(notes, func(a, b note) int {
		return cmp.Or(cmp.Compare(a.proc, b.proc), strings.Compare(a.text, b.text))
	})
	for _, n := range notes {
		w.tracef("%s", n.text)
	}
	slices.SortStableFunc(holds, func(a, b newHold) int {
		return cmp.Or(cmp.Compare(a.p.index, b.p.index), strings.Compare(a.h.Actor.Key(), b.h.Actor.Key()))
	})
	for _, nh := range parks {
		w.parkedAt[holdKey{nh.h.Actor, nh.h.Generation}] = true
		w.res.Parks++
	}
	for _, nh := range holds {
		k := holdKey{nh.h.Actor, nh.h.Generation}
		id := holdID{nh.p.String(), string(nh.h.Version)}
		prev, seen := w.holds[k]
		switch {
		case seen && w.parkedAt[k]:
			w.violation("%s took back its parked hold of %s at generation %d without a write", nh.p, nh.h.Actor, nh.h.Generation)
		case !seen:
			w.holds[k] = id
			w.top[k.actor] = max(w.top[k.actor], k.gen)
			w.res.Holds++
			w.tracef("%s holds %s at generation %d", nh.p, nh.h.Actor, nh.h.Generation)
		case prev != id:
			w.violation("generation %d of %s made two holds: %s (version %s), then %s (version %s)",
				nh.h.Generation, nh.h.Actor, prev.proc, prev.version, id.proc, id.version)
		}
	}
	// One actor on one process at each event: an event runs only under
	// the actor's newest hold, never on an older copy once another
	// process took it at a higher generation.
	slices.SortStableFunc(ran, func(a, b ranEvent) int {
		return cmp.Or(cmp.Compare(a.p.index, b.p.index), strings.Compare(a.a.Key(), b.a.Key()))
	})
	for _, e := range ran {
		if top := w.top[e.a]; top > e.gen {
			w.violation("%s ran an event of %s under generation %d after generation %d was held", e.p, e.a, e.gen, top)
		}
	}
	for _, p := range w.procs {
		w.mu.Lock()
		ended, lost, joinErr, dead, m := p.ended, p.lost, p.joinErr, p.dead, p.member
		w.mu.Unlock()
		w.mu.Lock()
		drained := p.stopping && !slices.Contains(slices.Collect(maps.Values(p.busy)), true)
		w.mu.Unlock()
		if drained && !p.quitting {
			p.cancel()
			p.end()
			spawned = true // what it woke runs before the next step
		}
		if m != nil && !p.listing && !dead && lost == nil && p.ctx.Err() == nil {
			p.listing, spawned = true, true
			w.spawn(func() { m.WatchPeers(p.ctx) })
		}
		if p.handled || dead || lost == nil && !(ended && joinErr != nil) {
			continue
		}
		p.handled = true
		var twin *nodelease.TwinError
		switch {
		case lost != nil:
			w.res.Lost++
			w.tracef("%s exits: %v", p, lost)
		case errors.As(joinErr, &twin):
			w.res.Twins++
			w.tracef("%s refused to start: a twin", p)
		default:
			w.tracef("%s did not start: %v", p, joinErr)
		}
		if p == p.n.cur && !w.stopping {
			w.after(w.ms(1000, 5000), p.n.start)
		}
	}
	return spawned
}

// check is the invariant at this instant: no two processes own one actor
// (each by its own Owns: its hold and its lease's validity on its clock).
func (w *world) check() {
	for _, x := range w.allActors() {
		var owners []string
		var procs []*process
		for _, p := range w.procs {
			w.mu.Lock()
			m, dead := p.member, p.dead
			w.mu.Unlock()
			if m == nil || dead {
				continue
			}
			if h, ok := m.Owners.Owns(x); ok {
				owners = append(owners, fmt.Sprintf("%s at generation %d", p, h.Generation))
				procs = append(procs, p)
			}
		}
		if len(owners) > 1 {
			w.violation("%s owned by %s", x, strings.Join(owners, " and "))
		}
		w.checkParked(x, procs)
	}
}
