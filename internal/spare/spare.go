// Package spare keeps one thing made ahead of its use: an engine's
// instance of a module, made in the background after each instance the
// module gives out, so that the next one is ready when an event asks for
// it (ADR 1061).
package spare

import (
	"sync"
	"sync/atomic"
	"time"
)

// Spare holds at most one T, made by Make in a goroutine of its own and
// freed by Free when it is stale, unused for Keep, or the Spare closes. A
// nil *Spare makes none ahead: Get makes each one then.
type Spare[T any] struct {
	// Make makes one; false if none could be made now.
	Make func() (T, bool)
	// Usable reports whether one made earlier may still be given out (nil:
	// always); one that may not is freed, off the caller's path.
	Usable func(T) bool
	Free   func(T)
	// Keep is how long one no caller took is kept: DefaultKeep if 0.
	Keep time.Duration
	// Group, if set, is the engine's: its Close waits for the goroutines
	// of every Spare in it and starts no more.
	Group *Group

	getting atomic.Int32 // Gets in progress
	mu      sync.Mutex
	v       T
	ready   bool
	unused  *time.Timer // frees v once it was kept for Keep
	making  bool
	closed  bool
}

// DefaultKeep is how long one no caller took is kept, unless the Spare
// says otherwise: a module whose actors are rarely new keeps none.
const DefaultKeep = 30 * time.Second

// Get returns the one made ahead, if it is ready and usable, or else one
// made now by now. Alone, it has the next one made; beside other Gets it
// does not: where callers make their own side by side, the cores are busy,
// and one made ahead would take one from them (bench/README.md, "Issue 30:
// instances made ahead").
func (s *Spare[T]) Get(now func() (T, error)) (T, error) {
	if s == nil {
		return now()
	}
	alone := s.getting.Add(1) == 1
	defer s.getting.Add(-1)
	if v, ok := s.take(alone); ok {
		if s.Usable == nil || s.Usable(v) {
			return v, nil
		}
		if !s.background(func() { s.Free(v) }) {
			s.Free(v)
		}
	}
	return now()
}

// take returns the one made ahead, if it is ready, and with refill has the
// next made.
func (s *Spare[T]) take(refill bool) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.v, s.ready
	s.drop()
	if refill {
		s.refill()
	}
	return v, ok
}

// Ready reports whether one is ready to take.
func (s *Spare[T]) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// drop forgets the one ready, if any, and its timer. s.mu is held.
func (s *Spare[T]) drop() {
	var zero T
	s.v, s.ready = zero, false
	if s.unused != nil {
		s.unused.Stop()
		s.unused = nil
	}
}

// refill has one made in the background, unless one is ready, being made,
// or the Spare is closed. s.mu is held.
func (s *Spare[T]) refill() {
	if s.closed || s.making || s.ready {
		return
	}
	s.making = s.background(func() {
		v, ok := s.Make()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.making = false
		switch {
		case !ok:
		case s.closed:
			s.Free(v)
		default:
			s.v, s.ready = v, true
			keep := s.Keep
			if keep == 0 {
				keep = DefaultKeep
			}
			var timer *time.Timer
			timer = time.AfterFunc(keep, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.unused == timer { // not taken, nor replaced, since
					s.Free(s.v)
					s.drop()
				}
			})
			s.unused = timer
		}
	})
}

// background runs f in a goroutine of its own, counted in s.Group; false
// if the group has closed.
func (s *Spare[T]) background(f func()) bool {
	if !s.Group.start() {
		return false
	}
	go func() {
		defer s.Group.done()
		f()
	}()
	return true
}

// Close frees the one ready, if any, and makes no more: one being made is
// freed as it is done.
func (s *Spare[T]) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ready {
		s.Free(s.v)
	}
	s.drop()
}

// Group is an engine's Spares: Close waits for their goroutines (making
// one, freeing one) and has them start no more. The zero Group is ready
// to use; a nil one counts nothing.
type Group struct {
	mu      sync.Mutex
	running sync.WaitGroup
	closed  bool
}

func (g *Group) start() bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.running.Add(1)
	return true
}

func (g *Group) done() {
	if g != nil {
		g.running.Done()
	}
}

// Close waits for the goroutines of the group's Spares and has them start
// no more.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.running.Wait()
}
