package alarm

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// A due alarm refused admission (capacity, a full queue) is tried again
// after a delay between half and all of a ceiling from 100 ms to 5 s.
const (
	admitRetryFirst = 100 * time.Millisecond
	admitRetryMax   = 5 * time.Second
)

// Schedule is the node's timer: the next due time of every actor with a
// pending alarm, fed by the events that touch alarms and, at start, by the
// alarm index.
type Schedule struct {
	mu    sync.Mutex
	items alarmHeap
	byKey map[string]*Item
	kick  chan struct{}
}

// Item is an actor's due time in the schedule.
type Item struct {
	Key         string // the actor's key, tenant/class/name
	Class, Name string
	// At is the alarm's time the delivery is for: what the actor's
	// database or an index entry holds. Defer moves when it is delivered,
	// never At.
	At    time.Time
	due   time.Time
	tries int // admission refusals in a row
	index int
}

type alarmHeap []*Item

func (h alarmHeap) Len() int           { return len(h) }
func (h alarmHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h alarmHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *alarmHeap) Push(x any)        { it := x.(*Item); it.index = len(*h); *h = append(*h, it) }
func (h *alarmHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// NewSchedule returns an empty schedule.
func NewSchedule() *Schedule {
	return &Schedule{byKey: map[string]*Item{}, kick: make(chan struct{}, 1)}
}

// Set schedules (or moves) an actor's alarm; Clear forgets it.
func (s *Schedule) Set(key, class, name string, due time.Time) { s.SetAt(key, class, name, due, due) }

// SetAt schedules the delivery of the actor's alarm at at for due: a
// delivery tried again later keeps the time it is for.
func (s *Schedule) SetAt(key, class, name string, at, due time.Time) {
	s.mu.Lock()
	s.set(key, class, name, at, due, 0)
	s.mu.Unlock()
	s.poke()
}

// set schedules the alarm at at for due, with tries admission refusals;
// s.mu is held.
func (s *Schedule) set(key, class, name string, at, due time.Time, tries int) {
	if it := s.byKey[key]; it != nil {
		it.At, it.due, it.tries = at, due, tries
		heap.Fix(&s.items, it.index)
		return
	}
	it := &Item{Key: key, Class: class, Name: name, At: at, due: due, tries: tries}
	s.byKey[key] = it
	heap.Push(&s.items, it)
}

func (s *Schedule) Clear(key string) {
	s.mu.Lock()
	if it := s.byKey[key]; it != nil {
		heap.Remove(&s.items, it.index)
		delete(s.byKey, key)
	}
	s.mu.Unlock()
}

// At is the time the schedule holds key's alarm for (Item.At), if it
// holds one.
func (s *Schedule) At(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.byKey[key]; it != nil {
		return it.At, true
	}
	return time.Time{}, false
}

// Items are the alarms the schedule holds, copies in no order.
func (s *Schedule) Items() []Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Item, 0, len(s.byKey))
	for _, it := range s.byKey {
		out = append(out, Item{Key: it.Key, Class: it.Class, Name: it.Name, At: it.At})
	}
	return out
}

// ClearAt forgets key's alarm if it is still for at: one set since (a
// newer registration) stays.
func (s *Schedule) ClearAt(key string, at time.Time) {
	s.mu.Lock()
	if it := s.byKey[key]; it != nil && it.At.Equal(at) {
		heap.Remove(&s.items, it.index)
		delete(s.byKey, key)
	}
	s.mu.Unlock()
}

// ClearClass forgets the alarms of class's actors (a version dropped the
// class; the alarms stay in their databases and the index).
func (s *Schedule) ClearClass(class string) {
	s.mu.Lock()
	for key, it := range s.byKey {
		if it.Class == class {
			heap.Remove(&s.items, it.index)
			delete(s.byKey, key)
		}
	}
	s.mu.Unlock()
}

func (s *Schedule) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// next pops the first due alarm, or says how long until one is.
func (s *Schedule) next(now time.Time) (*Item, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 {
		return nil, time.Hour
	}
	if it := s.items[0]; !it.due.After(now) {
		heap.Pop(&s.items)
		delete(s.byKey, it.Key)
		return it, 0
	}
	return nil, s.items[0].due.Sub(now)
}

// Run hands each alarm to deliver as it falls due on clk, until ctx ends.
func (s *Schedule) Run(ctx context.Context, clk clock.Clock, deliver func(*Item)) {
	t := clk.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := clk.Now()
		it, wait := s.next(now)
		if it != nil {
			deliver(it)
			continue
		}
		t.Reset(wait)
		// The timer counts wait from when it was armed: if the clock
		// moved meanwhile (a manual clock advanced, this thread
		// descheduled), it would fire late by as much, so compute again.
		if clk.Now().Sub(now) > time.Millisecond {
			continue
		}
		select {
		case <-t.C():
		case <-s.kick:
		case <-ctx.Done():
			return
		}
	}
}

// Defer schedules a due alarm that was refused admission (or whose owner
// is not known now) again, after a backoff with jitter that grows with the
// refusals in a row, unless an event rescheduled it meanwhile; it returns
// the delay.
func (s *Schedule) Defer(it *Item, now time.Time) time.Duration {
	ceiling := min(admitRetryFirst<<min(it.tries, 8), admitRetryMax)
	delay := ceiling/2 + rand.N(ceiling/2+1)
	s.mu.Lock()
	retry := s.byKey[it.Key] == nil // an event may have rescheduled it meanwhile
	if retry {
		s.set(it.Key, it.Class, it.Name, it.At, now.Add(delay), it.tries+1)
	}
	s.mu.Unlock()
	if retry {
		s.poke()
	}
	return delay
}

// Offer schedules an actor's alarm at due, an overdue entry a sweep read
// in the bucket's index, unless a time the schedule holds for it wins
// (Holds); it reports whether due was scheduled.
func (s *Schedule) Offer(key, class, name string, due, now time.Time, retry time.Duration) bool {
	s.mu.Lock()
	held := s.holds(key, now, retry)
	if !held {
		s.set(key, class, name, due, due, 0)
	}
	s.mu.Unlock()
	if !held {
		s.poke()
	}
	return !held
}

// Holds reports whether the schedule holds a time for key that wins over
// a sweep's offer (book ADR 0009, point 4: "a time it already holds
// earlier, or within the longest backoff (a retry)"): one at most retry,
// the longest backoff, from now. An offer is overdue, so a time held
// earlier than it is within that too.
func (s *Schedule) Holds(key string, now time.Time, retry time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds(key, now, retry)
}

// holds is Holds; s.mu is held.
func (s *Schedule) holds(key string, now time.Time, retry time.Duration) bool {
	it := s.byKey[key]
	return it != nil && !it.due.After(now.Add(retry))
}
