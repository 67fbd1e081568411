// Package cputime measures and bounds the CPU time of one OS thread. Guests
// and SQLite statements run on the calling goroutine's thread (the kernel
// locks it for the event), so that thread's CPU clock is what an event
// spends, whatever else the machine does. Both the guest CPU budget (kernel)
// and the SQL CPU budget (storage plugins) use it.
package cputime

import (
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

// Watch bounds the CPU time the calling thread spends from Start to Stop,
// less what Exclude takes out. It costs one clock read at Start and Stop and
// one timer; the thread's clock is read again only once the whole budget has
// passed in wall time, since CPU time cannot run ahead of it.
type Watch struct {
	clock    int32
	start    time.Duration
	limit    time.Duration
	excluded atomic.Int64
	onExceed func()

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// Start begins watching the calling (locked) thread; onExceed runs once, on
// another goroutine, when the budget is spent. A limit <= 0 watches nothing.
func Start(limit time.Duration, onExceed func()) *Watch {
	w := &Watch{clock: threadClock(unix.Gettid()), limit: limit, onExceed: onExceed}
	w.start, _ = readClock(w.clock)
	if limit > 0 {
		w.mu.Lock()
		w.timer = time.AfterFunc(limit, w.check)
		w.mu.Unlock()
	}
	return w
}

// Exclude takes d off the time counted (time spent in host calls).
func (w *Watch) Exclude(d time.Duration) { w.excluded.Add(int64(d)) }

// Used is the CPU time counted so far.
func (w *Watch) Used() time.Duration {
	now, ok := readClock(w.clock)
	if !ok {
		return 0
	}
	return now - w.start - time.Duration(w.excluded.Load())
}

func (w *Watch) check() {
	used := w.Used()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if used >= w.limit {
		w.stopped = true
		go w.onExceed()
		return
	}
	next := w.limit - used
	if next < time.Millisecond {
		next = time.Millisecond
	}
	w.timer.Reset(next)
}

// Stop ends the watch and returns the CPU time counted. It must be called on
// the watched thread, before the goroutine unlocks it.
func (w *Watch) Stop() time.Duration {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	return w.Used()
}
