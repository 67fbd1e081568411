// Package fair shares a node's cores between actors that use little CPU
// and actors that use much of it (ADR 1057). An actor whose recent CPU is
// under Heavy runs its guest code at once, as Go schedules it. A heavy one
// runs it only in one of a few turns (one core fewer than Go runs on, so a
// core is always left to the light ones and to the node's own work); events
// beyond them wait off the Go scheduler's run queue, and a turn that falls
// free goes to the waiting actor that used the least CPU recently. A turn
// held past a quantum of CPU is given back at the holder's next host call
// when another event waits. An event becomes heavy at a host call, once its
// actor's recent CPU and its own pass Heavy.
package fair

import (
	"container/heap"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cputime"
)

// Heavy is the recent CPU past which an actor's guest code runs only in a
// turn. Tens of times what an ordinary event takes (a counter's is about
// 0.1 ms), so that only an actor that keeps a core busy, or an event that
// runs long, is rationed.
const Heavy = 20 * time.Millisecond

// Quantum is the CPU a turn may run for before it yields to a waiting event.
// Well below the Go scheduler's own 10 ms slice; above the cost of handing a
// turn over (a thread's wake-up, some µs), which a looping actor pays once
// a quantum.
const Quantum = time.Millisecond

// HalfLife is how fast an actor's recent CPU is forgotten: an actor idle
// for a second counts half the CPU it used before.
const HalfLife = time.Second

// Share is one actor's account: the CPU it used recently and how its guest
// code runs now. It is used by one event at a time, whichever goroutine runs it.
type Share struct {
	used    time.Duration // decayed to at
	at      int64         // ns on the node's clock
	began   time.Duration // its recent CPU as the running code began
	cpu     time.Duration // the thread's CPU clock when the running code began, or was last charged
	holding bool          // the running code holds a turn
	ready   chan struct{} // a waiting turn is granted
}

// recent is sh's CPU decayed to now.
func (sh *Share) recent(now int64) time.Duration {
	if sh.used == 0 || now <= sh.at {
		return sh.used
	}
	return time.Duration(float64(sh.used) * math.Exp2(-float64(now-sh.at)/float64(HalfLife)))
}

// Sched hands out the turns.
type Sched struct {
	mu      sync.Mutex
	free    int
	waiting queue
	seq     uint64
	waiters atomic.Int32 // len(waiting), read without the lock by Check
	// cpu reads the calling thread's CPU clock (cputime.Thread); now the
	// node's clock in ns. Tests give their own.
	cpu func() time.Duration
	now func() int64
}

// New returns a scheduler of turns turns (at least one), reading the time
// from now.
func New(turns int, now func() time.Time) *Sched {
	return &Sched{free: max(turns, 1), cpu: cputime.Thread, now: func() int64 { return now().UnixNano() }}
}

// Waiting is the number of events waiting for a turn.
func (s *Sched) Waiting() int { return int(s.waiters.Load()) }

// Begin starts a run of guest code for sh, waiting for a turn if its actor
// is heavy. The caller runs on a locked OS thread until End: its CPU clock
// is the run's.
func (s *Sched) Begin(sh *Share) { s.BeginAt(sh, s.cpu()) }

// BeginAt is Begin, cpu the thread's CPU clock as the run begins (read by
// the caller's own CPU watch: a read is a system call). A wait for a turn
// spends next to no CPU, so the clock read before it serves.
func (s *Sched) BeginAt(sh *Share, cpu time.Duration) {
	now := s.now()
	sh.began = sh.recent(now)
	sh.cpu = cpu
	if sh.began >= Heavy {
		s.mu.Lock()
		s.acquire(sh, now)
	}
}

// End ends sh's run, charging it the CPU the run took, and hands its turn,
// if it held one, to the waiting actor that used the least recently.
func (s *Sched) End(sh *Share) { s.EndAt(sh, s.cpu()) }

// EndAt is End, cpu the thread's CPU clock as the run ended.
func (s *Sched) EndAt(sh *Share, cpu time.Duration) {
	s.charge(sh, cpu)
	if sh.holding {
		sh.holding = false
		s.mu.Lock()
		s.pass()
		s.mu.Unlock()
	}
}

// Check is called at each host call's start, cpu the thread's CPU clock
// then (reading it is a system call): a run that has made its actor heavy
// waits for a turn; a turn held for a quantum is given to a waiting event,
// and taken back. Cheap otherwise: one atomic load when a turn is held.
func (s *Sched) Check(sh *Share, cpu time.Duration) {
	switch {
	case !sh.holding && sh.began+cpu-sh.cpu >= Heavy:
		now := s.charge(sh, cpu)
		s.mu.Lock()
		s.acquire(sh, now)
	case sh.holding && s.waiters.Load() > 0 && cpu-sh.cpu >= Quantum:
		now := s.charge(sh, cpu)
		s.mu.Lock()
		s.pass()
		s.acquire(sh, now)
	default:
		return
	}
	sh.cpu = s.cpu()
}

// Offload runs f, which waits for something other than the CPU (a call to
// another actor, a fetch, an fsync, a sleep), outside sh's run: a turn
// held through such a wait would idle a core, and a call's callee could
// wait for the turn its caller holds.
func (s *Sched) Offload(sh *Share, f func()) {
	s.End(sh)
	defer s.Begin(sh)
	f()
}

// charge adds the CPU since sh.cpu to sh's recent use, and returns the
// time it did so.
func (s *Sched) charge(sh *Share, cpu time.Duration) int64 {
	now := s.now()
	sh.used = sh.recent(now) + max(cpu-sh.cpu, 0)
	sh.at = now
	return now
}

// acquire takes a free turn for sh, or queues it and waits for one; s.mu is
// held, and released.
func (s *Sched) acquire(sh *Share, now int64) {
	sh.holding = true
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.mu.Unlock()
		return
	}
	if sh.ready == nil {
		sh.ready = make(chan struct{}, 1)
	}
	s.seq++
	heap.Push(&s.waiting, waiter{share: sh, recent: sh.recent(now), seq: s.seq})
	s.waiters.Store(int32(len(s.waiting)))
	s.mu.Unlock()
	<-sh.ready
}

// pass hands a turn given back to the first waiter, or frees it; s.mu is
// held.
func (s *Sched) pass() {
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	next := heap.Pop(&s.waiting).(waiter)
	s.waiters.Store(int32(len(s.waiting)))
	next.share.ready <- struct{}{}
}

type waiter struct {
	share  *Share
	recent time.Duration // the share's recent CPU as it began to wait
	seq    uint64        // arrival order, among equal recent use
}

// queue is a min-heap of waiters: least recent CPU first.
type queue []waiter

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].recent != q[j].recent {
		return q[i].recent < q[j].recent
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(waiter)) }
func (q *queue) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	return w
}
