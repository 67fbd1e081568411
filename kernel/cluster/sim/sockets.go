package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// Socket home (Config.SocketHome; ADR 1055, book ADR 0024): a session may
// open a socket of its actor on its process, and a session ending with a
// socket open parks its hold (ownership.Owners.Park) instead of releasing
// it, as a node's idle drop does, unless the process stops or drains. An
// event landing on a node reads the actor's record first (the real
// routing read) and is relayed to the live process it names, where it
// wakes the actor with an acquisition (ownership.Acquire). Sockets close
// at random, every socket of a process at its lapse and at its drain; the
// last one's close releases a parked record, as does each drain pass and a
// clean stop. The check adds that no process owns an actor another keeps
// parked with a valid lease, and that no hold is taken back from a park
// without a write (a new generation).

// openSocket opens a socket of x on p while p runs it, now and then.
func (p *process) openSocket(x ownership.Actor, rng *rand.Rand) {
	w := p.w
	if !w.cfg.SocketHome || rng.IntN(3) != 0 {
		return
	}
	w.mu.Lock()
	open := !p.draining && !p.stopping
	if open {
		p.sockets[x]++
	}
	w.mu.Unlock()
	if open {
		w.note(p, "a socket of %s opens", x)
	}
}

// relay is the routing of an event for x landing on p: when x's record
// names another live process (in p's membership view), or names nobody
// and a successor that is one, not draining, before its time (the moves'
// workload), the event goes there (a session of its own, unless one runs)
// and relay reports true.
func (p *process) relay(x ownership.Actor, seed uint64) bool {
	w, m := p.w, p.member
	rec, found, err := m.Owners.Owner(p.ctx, x)
	if err != nil || !found {
		return false
	}
	node, instance, toNext := rec.Node, rec.Instance, false
	if rec.Nobody() && w.cfg.Moves && p.clk.Now().Before(rec.Next.Until) {
		node, instance, toNext = rec.Next.Node, rec.Next.Instance, true
	}
	if node == "" || node == p.n.id {
		return false
	}
	if peer, err := m.View.Live(node); err != nil || peer.Object.Instance != instance {
		return false
	}
	i := slices.IndexFunc(w.procs, func(q *process) bool { return q.n.id == node && q.instance == instance })
	if i < 0 {
		return false
	}
	q := w.procs[i]
	w.mu.Lock()
	ok := q.member != nil && !q.dead && !q.stopping && q.lost == nil && !q.busy[x] && !(toNext && q.draining)
	if ok {
		q.busy[x] = true
		w.res.Relays++
		if toNext {
			w.res.ToNext++
		}
	}
	w.mu.Unlock()
	w.note(p, "relays %s to %s (taken %v)", x, q, ok)
	if ok {
		w.spawn(func() { q.session(x, seed^0x9e3779b97f4a7c15, 0) })
	}
	return true
}

// hibernate ends a resident whose session is over, as a node's idle drop:
// with a socket of x open on p (p neither stopping nor draining), its hold
// is parked; otherwise, or if the hold may no longer act, released.
func (p *process) hibernate(x ownership.Actor, r *resident) {
	w := p.w
	w.mu.Lock()
	if p.resident[x] == r {
		delete(p.resident, x)
	}
	w.mu.Unlock()
	p.close(x, r)
	w.mu.Lock()
	sockets := p.sockets[x] > 0 && !p.stopping && !p.draining
	w.mu.Unlock()
	if sockets && p.member.Owners.Park(r.hold) {
		w.mu.Lock()
		w.parks = append(w.parks, newHold{p, r.hold})
		w.mu.Unlock()
		w.note(p, "parks %s at generation %d", x, r.hold.Generation)
		p.lastSocket(x) // its socket may have closed meanwhile
		return
	}
	p.release(x, r)
}

// lastSocket releases x's parked record on p once x has no socket there.
func (p *process) lastSocket(x ownership.Actor) {
	w := p.w
	w.mu.Lock()
	none := p.sockets[x] == 0
	w.mu.Unlock()
	if !none {
		return
	}
	if ok, err := p.member.Owners.ReleaseParked(p.ctx, x); ok {
		w.mu.Lock()
		w.res.LastSocket++
		w.mu.Unlock()
		w.note(p, "last socket of %s: parked record released, pending %v", x, err != nil)
	}
}

// closeSocket closes one socket, of a process and actor drawn at random;
// the last of an actor's releases its parked record.
func (w *world) closeSocket() {
	type open struct {
		p *process
		x ownership.Actor
	}
	var all []open
	w.mu.Lock()
	for _, p := range w.procs {
		for x, n := range p.sockets {
			if n > 0 && !p.dead {
				all = append(all, open{p, x})
			}
		}
	}
	w.mu.Unlock()
	if len(all) == 0 {
		return
	}
	slices.SortFunc(all, func(a, b open) int {
		return cmp.Or(cmp.Compare(a.p.index, b.p.index), strings.Compare(a.x.Key(), b.x.Key()))
	})
	o := all[w.rng.IntN(len(all))]
	w.mu.Lock()
	o.p.sockets[o.x]--
	last := o.p.sockets[o.x] == 0
	w.mu.Unlock()
	w.tracef("a socket of %s on %s closes", o.x, o.p)
	if last && o.p.member != nil {
		w.spawn(func() { o.p.lastSocket(o.x) })
	}
}

// drain is a drain of p for length: its sockets close, it parks nothing,
// and each pass (at its start and its end) releases every parked record.
func (p *process) drain(length time.Duration) {
	w := p.w
	w.mu.Lock()
	p.draining = true
	clear(p.sockets)
	w.mu.Unlock()
	w.tracef("%s drains for %v", p, length)
	w.spawn(p.drainPass)
	w.after(length, func() {
		w.spawn(p.drainPass)
		w.mu.Lock()
		p.draining = false
		w.mu.Unlock()
		w.tracef("%s takes actors again", p)
	})
}

// drainPass releases every parked record of p.
func (p *process) drainPass() {
	w := p.w
	if n := p.member.Owners.ReleaseAllParked(p.ctx); n > 0 {
		w.mu.Lock()
		w.res.Drained += n
		w.mu.Unlock()
		w.note(p, "drain pass released %d parked records", n)
	}
}

// checkParked is the socket home's invariant at this instant: no process
// owns an actor that another keeps parked with a valid lease.
func (w *world) checkParked(x ownership.Actor, owners []*process) {
	for _, p := range w.procs {
		w.mu.Lock()
		m, dead := p.member, p.dead
		w.mu.Unlock()
		if m == nil || dead || !m.Owners.Parked(x) || !m.Lease.Valid() {
			continue
		}
		for _, q := range owners {
			if q != p {
				w.violation("%s owned by %s while %s keeps it parked", x, q, p)
			}
		}
	}
}
