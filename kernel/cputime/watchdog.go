package cputime

import (
	"container/heap"
	"sync"
	"time"
)

// dog checks every watch of the process.
var dog watchdog

// watchdog checks the running watches on one timer for the process (ADR
// 1071). A timer per watch, armed as it starts, was a runtime timer added
// per guest call: one that is the earliest of its processor's has the
// runtime wake a thread that sleeps in the network poller, or start one,
// about 10 µs of context switches on the paravirtualised VMs the bench runs
// on. The watchdog's timer is armed again only when a watch is due before
// it fires or when it is not armed, and while watches start it stays armed
// a period ahead (the last watch's nearer limit), so a watch's start in
// steady work touches no runtime timer. Once idle it is left unarmed.
type watchdog struct {
	mu      sync.Mutex
	due     dueHeap     // the watches with a check due, earliest first
	timer   *time.Timer // made at the first watch
	at      time.Time   // when timer fires; zero: not armed
	started bool        // a watch has started since the timer last fired
	period  time.Duration
}

// dogEntry is a watch's place in the watchdog, guarded by the watchdog's
// mutex (but watched, which only the watch's own thread writes, in Start
// and Stop, is read there without it).
type dogEntry struct {
	watched bool      // added and not removed
	at      time.Time // when it is next checked
	index   int       // in due; -1: no check due, until its host call returns (Watch.recheck)
}

// add has w checked first at its start plus first.
func (d *watchdog) add(w *Watch, first time.Duration) {
	at := w.began.Add(first)
	d.mu.Lock()
	defer d.mu.Unlock()
	w.dog = dogEntry{watched: true, at: at, index: -1}
	heap.Push(&d.due, w)
	d.started, d.period = true, first
	d.armBy(at)
}

// set has w, if it is still watched, checked again after next (0: not
// until its host call returns).
func (d *watchdog) set(w *Watch, next time.Duration) {
	var at time.Time
	if next > 0 {
		at = time.Now().Add(next)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e := &w.dog
	switch {
	case !e.watched:
		return
	case at.IsZero():
		if e.index >= 0 {
			heap.Remove(&d.due, e.index)
		}
		return
	}
	e.at = at
	if e.index >= 0 {
		heap.Fix(&d.due, e.index)
	} else {
		heap.Push(&d.due, w)
	}
	d.armBy(at)
}

// remove forgets w, which has stopped.
func (d *watchdog) remove(w *Watch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.dog.index >= 0 {
		heap.Remove(&d.due, w.dog.index)
	}
	w.dog.watched = false
}

// armBy has the timer fire at at unless it is armed to fire sooner. d.mu
// is held.
func (d *watchdog) armBy(at time.Time) {
	if !d.at.IsZero() && !at.Before(d.at) {
		return
	}
	d.at = at
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(at), d.fire)
		return
	}
	d.timer.Reset(time.Until(at))
}

// fire checks the watches that are due, then arms the timer for the next
// one, or a period ahead if watches have started since it last fired.
func (d *watchdog) fire() {
	var due []*Watch
	d.mu.Lock()
	now := time.Now()
	for len(d.due) > 0 && !d.due[0].dog.at.After(now) {
		due = append(due, heap.Pop(&d.due).(*Watch)) // set puts it back
	}
	d.at = time.Time{}
	d.mu.Unlock()
	for _, w := range due {
		w.recheckNow()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var next time.Time
	switch {
	case len(d.due) > 0:
		next = d.due[0].dog.at
	case d.started:
		next = now.Add(d.period)
	}
	d.started = false
	if !next.IsZero() {
		d.armBy(next)
	}
}

// dueHeap orders watches by when they are next checked (container/heap).
type dueHeap []*Watch

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].dog.at.Before(h[j].dog.at) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dog.index, h[j].dog.index = i, j
}
func (h *dueHeap) Push(x any) {
	w := x.(*Watch)
	w.dog.index = len(*h)
	*h = append(*h, w)
}
func (h *dueHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.dog.index = -1
	*h = old[:len(old)-1]
	return w
}
