package clock

import (
	"slices"
	"sync"
	"time"
)

// Manual is a Clock that moves only when told (Advance, AdvanceToNext):
// timers fire in the order of their deadlines, those due at the same time
// in the order they were armed, so a run is the same every time. A NewTimer
// timer's channel has room for one value, which Stop and Reset drop if
// nobody read it, as time.Timer's do since Go 1.23. An AfterFunc
// timer's f runs on the goroutine that advances the clock, before the next
// timer fires (time.AfterFunc runs it on a goroutine of its own): so f must
// not wait for anything only another Advance would bring.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64 // arming order, to break ties
	timers []*manualTimer
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *Manual) AfterFunc(d time.Duration, f func()) Timer {
	return m.arm(&manualTimer{m: m, f: f}, d)
}

func (m *Manual) NewTimer(d time.Duration) Timer {
	return m.arm(&manualTimer{m: m, ch: make(chan time.Time, 1)}, d)
}

func (m *Manual) arm(t *manualTimer, d time.Duration) *manualTimer {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.schedule(t, d)
	return t
}

// schedule arms t for d from now; m.mu is held.
func (m *Manual) schedule(t *manualTimer, d time.Duration) {
	m.seq++
	t.when, t.seq, t.armed = m.now.Add(max(d, 0)), m.seq, true
	m.timers = append(m.timers, t)
}

// Advance moves the clock d forward, firing every timer due by then, each
// with the clock reading its deadline.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	end := m.now.Add(d)
	m.mu.Unlock()
	for m.fireNext(end) {
	}
	m.mu.Lock()
	m.now = end
	m.mu.Unlock()
}

// AdvanceToNext moves the clock to the earliest armed timer's deadline and
// fires the timers due then; it reports false, moving nothing, if none is
// armed.
func (m *Manual) AdvanceToNext() bool {
	m.mu.Lock()
	t := m.next()
	m.mu.Unlock()
	if t == nil {
		return false
	}
	m.Advance(t.when.Sub(m.Now()))
	return true
}

// Next is the earliest armed timer's deadline; false if none is armed. A
// test waits on it for the code it drives to settle (until no timer is due
// soon, nothing is in the middle of a short wait that a long Advance would
// cut short); a simulation, to know when its next step is.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.next(); t != nil {
		return t.when, true
	}
	return time.Time{}, false
}

// FireNext moves the clock to the earliest armed timer's deadline and
// fires the timers due then that were armed before the call, in arming
// order; a timer armed meanwhile (by what those woke) waits for the next
// call. A simulation lets what they woke settle before it calls again. It
// reports false, moving nothing, if none is armed.
func (m *Manual) FireNext() bool {
	m.mu.Lock()
	t := m.next()
	if t == nil {
		m.mu.Unlock()
		return false
	}
	when, last := t.when, m.seq
	m.mu.Unlock()
	for m.fire(when, last) {
	}
	return true
}

// Armed is how many timers are armed.
func (m *Manual) Armed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// next is the timer that fires first, or nil; m.mu is held.
func (m *Manual) next() *manualTimer {
	if len(m.timers) == 0 {
		return nil
	}
	return slices.MinFunc(m.timers, func(a, b *manualTimer) int {
		if c := a.when.Compare(b.when); c != 0 {
			return c
		}
		return int(a.seq) - int(b.seq)
	})
}

// fireNext fires the first timer due by end, if any.
func (m *Manual) fireNext(end time.Time) bool { return m.fire(end, ^uint64(0)) }

// fire fires the first timer due by end and armed by seq last, if any.
func (m *Manual) fire(end time.Time, last uint64) bool {
	m.mu.Lock()
	t := m.next()
	if t == nil || t.when.After(end) || t.seq > last {
		m.mu.Unlock()
		return false
	}
	m.remove(t)
	m.now = t.when
	now := m.now
	m.mu.Unlock()
	if t.f != nil {
		t.f()
	} else {
		select {
		case t.ch <- now:
		default: // an unread value is there already, as with time.Timer
		}
	}
	return true
}

// remove disarms t and drops a value it sent that nobody read; m.mu is
// held.
func (m *Manual) remove(t *manualTimer) bool {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	if !t.armed {
		return false
	}
	t.armed = false
	m.timers = slices.DeleteFunc(m.timers, func(o *manualTimer) bool { return o == t })
	return true
}

type manualTimer struct {
	m     *Manual
	f     func()
	ch    chan time.Time
	when  time.Time
	seq   uint64
	armed bool
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.m.remove(t)
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	was := t.m.remove(t)
	t.m.schedule(t, d)
	return was
}
