// Package cputime measures and bounds the CPU time of one OS thread. Guests
// and SQLite statements run on the calling goroutine's thread (the kernel
// locks it for the event), so that thread's CPU clock is what an event
// spends, whatever else the machine does. Both the guest CPU budget and the
// cap on an event's whole CPU (kernel) and the SQL CPU budget (storage
// plugins) use it.
package cputime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Thread returns the CPU time the calling OS thread has used. The caller
// should have locked its goroutine to the thread (runtime.LockOSThread).
func Thread() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// threadClock is the clock id of another thread's CPU clock (Linux's
// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)), readable from any thread.
func threadClock(tid int) int32 { return int32(^tid<<3 | 6) }

func readClock(id int32) (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// Watch bounds the CPU time the calling thread spends from Start to Stop in
// two ways: a budget on the time counted, which leaves out host calls (the
// guest's own CPU), and a cap on all of it (host calls included). It costs
// one clock read at Start and Stop and a place in the process's watchdog
// (watchdog), due when the nearer limit could run out; the thread's clock
// is read again only when it is due, since CPU time cannot run ahead of
// wall time.
//
// A host call (EnterHost to LeaveHost) is left out of the counted time by
// the CPU the thread spent in it, not by its wall time, which would credit
// the guest with every call's waiting (a fetch, an fsync, another actor's
// event) to spend on its own code. Past the watch's first exactAfter of wall
// time that CPU is read from the thread's clock at each end of the call. A
// read is a system call (about 2 µs on a virtual machine with page-table
// isolation), and most events end within that first millisecond, several
// host calls each: there, a call's ends are timed on the wall clock (no
// system call) and the calls together are left out by what the thread's
// clock shows beyond the guest's own wall time (youngCredit). That is never
// more than the calls' CPU, and less only by time the guest's own code
// waited for a core while calls spent CPU: at most the first exactAfter.
// The budget never runs out inside a host call: it is checked again when
// the call returns, so a guest over it is stopped as soon as it runs again.
// The cap runs out anywhere.
//
// A guest is stopped once it has spent confirmAfter more than the counted
// time at the first reading that found its budget spent: a virtual machine
// that reports no steal time charges the thread on a stalled virtual CPU
// with the stall, a lump of about 100 ms in one reading (ADR 1015,
// amendment "a stalled virtual CPU"). A guest that ends within
// confirmAfter of its own CPU after such a lump is not stopped; one that
// loops runs confirmAfter past its budget.
type Watch struct {
	clock    int32
	start    time.Duration // the thread's clock at Start
	began    time.Time     // the wall clock at Start
	limit    time.Duration // on the counted time; <= 0: none
	cap      time.Duration // on all the time; <= 0: none
	onExceed func()
	onCap    func()

	// Until young is false, host calls are timed on the wall clock (since
	// began): hostWall is the calls' that have returned, inHostWall when the
	// running one began (0: none runs). Only the watched thread ends young,
	// at a host call's end past exactAfter.
	young      atomic.Bool
	hostWall   atomic.Int64
	inHostWall atomic.Int64
	// After: the CPU left out (the young calls' credit, then each call's
	// CPU), and the thread's clock when the running call began (0: none).
	excluded atomic.Int64
	inHost   atomic.Int64
	recheck  atomic.Bool // the watchdog found the budget nearly spent during a host call

	mu      sync.Mutex
	stopped bool
	overAt  time.Duration // the counted time at the first reading that found the budget spent; 0: none

	dog dogEntry // its place in the watchdog
}

// exactAfter is how long a watch times host calls on the wall clock before
// it reads the thread's clock at each end of each call (see Watch).
var exactAfter = time.Millisecond

// confirmAfter is the CPU a guest spends past the first reading that finds
// its budget spent before the watch stops it (see Watch).
var confirmAfter = 2 * time.Millisecond

// Start begins watching the calling (locked) thread; onExceed runs once, on
// another goroutine, when the budget is spent. A limit <= 0 watches nothing.
func Start(limit time.Duration, onExceed func()) *Watch {
	return StartCapped(limit, onExceed, 0, nil)
}

// StartCapped is Start with a cap besides the budget: onCap runs once, on
// another goroutine, when the thread has spent limitAll in all, host calls
// included. At most one of onExceed and onCap runs. A limit <= 0 is none.
func StartCapped(limit time.Duration, onExceed func(), limitAll time.Duration, onCap func()) *Watch {
	w := &Watch{clock: threadClock(unix.Gettid()), limit: limit, cap: limitAll, onExceed: onExceed, onCap: onCap}
	w.young.Store(true)
	w.start, _ = readClock(w.clock)
	w.began = time.Now()
	if first := nearer(limit, limitAll); first > 0 {
		dog.add(w, first)
	}
	return w
}

type watchKey struct{}

// NewContext returns ctx carrying w, so that code the watched thread runs
// for its caller (a storage plugin's SQL budget) can bound what it counts
// by the thread's CPU since Start (Since) without a clock read of its own.
func NewContext(ctx context.Context, w *Watch) context.Context {
	return context.WithValue(ctx, watchKey{}, w)
}

// FromContext is the watch NewContext put in ctx, or nil.
func FromContext(ctx context.Context) *Watch {
	w, _ := ctx.Value(watchKey{}).(*Watch)
	return w
}

// Since is the CPU the watched thread has spent since Start, host calls
// included. ok is false unless the caller runs on that thread: what a
// caller on another thread spent is not on its clock.
func (w *Watch) Since() (all time.Duration, ok bool) {
	if threadClock(unix.Gettid()) != w.clock {
		return 0, false
	}
	now, ok := readClock(w.clock)
	return now - w.start, ok
}

// nearer is the smaller of two limits, where <= 0 is none.
func nearer(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// youngCredit is what the host calls of a young watch leave out of all, the
// thread's CPU since Start, wall after Start, when the calls took hostWall
// of it: what the thread spent beyond the guest's own wall time, at most the
// calls' wall time. The guest's CPU is at most its wall time, so the calls
// spent at least that, and at most their wall time.
func youngCredit(all, wall, hostWall time.Duration) time.Duration {
	return min(max(all-(wall-hostWall), 0), hostWall)
}

// EnterHost marks the start of a host call on the watched thread; its
// result goes to LeaveHost when the call returns.
func (w *Watch) EnterHost() time.Duration {
	if w.young.Load() {
		wall := max(time.Since(w.began), 1) // 0 means no call runs
		if wall < exactAfter {
			w.inHostWall.Store(int64(wall))
			return 0
		}
		// Past exactAfter: the calls so far are credited, this one is read.
		now, _ := readClock(w.clock)
		w.excluded.Store(int64(youngCredit(now-w.start, wall, time.Duration(w.hostWall.Load()))))
		since := max(now, 1)
		w.inHost.Store(int64(since))
		w.inHostWall.Store(int64(wall)) // a reader still on the young sums counts the call as host
		w.young.Store(false)
		return since
	}
	since, _ := readClock(w.clock)
	since = max(since, 1) // 0 means no call runs
	w.inHost.Store(int64(since))
	return since
}

// LeaveHost ends the host call begun at since: its CPU time is left out of
// the counted time, and the budget is checked if it ran low meanwhile.
func (w *Watch) LeaveHost(since time.Duration) {
	switch {
	case w.young.Load():
		wall := time.Since(w.began)
		entered := time.Duration(w.inHostWall.Load())
		if wall < exactAfter {
			w.hostWall.Add(int64(max(wall-entered, 0))) // before inHostWall clears, so no reader misses the call
			w.inHostWall.Store(0)
			break
		}
		now, _ := readClock(w.clock)
		w.excluded.Store(int64(youngCredit(now-w.start, wall, time.Duration(w.hostWall.Load())+max(wall-entered, 0))))
		w.young.Store(false) // inHost is 0: no call runs
	default:
		now, _ := readClock(w.clock)
		w.excluded.Add(int64(max(now-since, 0))) // before inHost clears, so no reader counts the call
		w.inHost.Store(0)
	}
	if w.recheck.CompareAndSwap(true, false) {
		w.recheckNow()
	}
}

// inHostCall says whether a host call is running.
func (w *Watch) inHostCall() bool {
	if w.young.Load() {
		return w.inHostWall.Load() != 0
	}
	return w.inHost.Load() != 0
}

// Used is the CPU time counted so far: all of it, less the host calls'.
func (w *Watch) Used() time.Duration {
	used, _, _ := w.times()
	return used
}

// times reads the thread's clock once: the time counted (less the host
// calls', the running one's so far too), all the time, and whether a host
// call is running.
func (w *Watch) times() (counted, all time.Duration, inHost bool) {
	young := w.young.Load()
	wall := time.Since(w.began)
	now, ok := readClock(w.clock)
	if !ok {
		return 0, 0, false
	}
	all = now - w.start
	if young {
		// The running call first: one that ends meanwhile is then in
		// hostWall too, counted twice (less counted) rather than not at all.
		var running time.Duration
		if entered := w.inHostWall.Load(); entered != 0 {
			running, inHost = max(wall-time.Duration(entered), 0), true
		}
		return all - youngCredit(all, wall, time.Duration(w.hostWall.Load())+running), all, inHost
	}
	counted = all - time.Duration(w.excluded.Load())
	if since := w.inHost.Load(); since != 0 {
		counted -= max(now-time.Duration(since), 0)
		inHost = true
	}
	return counted, all, inHost
}

// check reads the watch's times and runs the limit that has run out, if
// one has; otherwise it returns how long until one could (0: none will
// before the running host call returns, which checks again: recheck).
// w.mu is held.
func (w *Watch) check() time.Duration {
	counted, all, inHost := w.times()
	if w.stopped {
		return 0
	}
	var next time.Duration // until a limit could be reached; 0: none
	if w.cap > 0 {
		if all >= w.cap {
			w.stopped = true
			go w.onCap()
			return 0
		}
		next = w.cap - all
	}
	if w.limit > 0 && inHost {
		// The guest spends none of its budget before the call returns:
		// LeaveHost checks again then, rather than the watchdog, over and
		// over through a long call. Unless the call has just returned,
		// missing the flag.
		w.recheck.Store(true)
		inHost = w.inHostCall() || !w.recheck.CompareAndSwap(true, false)
	}
	if w.limit > 0 && !inHost {
		if w.overAt == 0 && counted >= w.limit {
			w.overAt = counted
		}
		left := w.limit - counted
		if w.overAt != 0 {
			left = w.overAt + confirmAfter - counted
		}
		if left <= 0 {
			w.stopped = true
			go w.onExceed()
			return 0
		}
		next = nearer(next, left)
	}
	if next <= 0 {
		return 0
	}
	return max(next, time.Millisecond)
}

// recheckNow checks the watch now and has the watchdog check it again when
// it is next due. The watchdog and a host call's end may both check a watch
// at once: the mutex makes each check and its due time one step, so the
// later check's time is the one kept.
func (w *Watch) recheckNow() {
	w.mu.Lock()
	defer w.mu.Unlock()
	dog.set(w, w.check())
}

// Stop ends the watch and returns the CPU time counted. It must be called on
// the watched thread, before the goroutine unlocks it.
func (w *Watch) Stop() time.Duration {
	used, _ := w.StopAt()
	return used
}

// StopAt is Stop, which also returns the thread's CPU clock as it stopped
// (for a caller that keeps its own account of the thread's CPU, the fair
// scheduler, without a clock read of its own: a system call).
func (w *Watch) StopAt() (used, clock time.Duration) {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	if w.dog.watched {
		dog.remove(w)
	}
	used, all, _ := w.times()
	return used, w.start + all
}

// StartClock is the thread's CPU clock as the watch started.
func (w *Watch) StartClock() time.Duration { return w.start }
