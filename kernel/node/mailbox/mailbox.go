// Package mailbox is an actor's queue of waiting events: bounded, first in
// first out, with a signal a single reader waits on. It knows nothing of
// what an event is.
package mailbox

import "sync"

// Mailbox holds at most limit waiting events. It holds memory only for what
// waits: a node keeps one per resident actor, and a channel buffered to the
// limit would set aside 8 KiB for each (1,024 pointers) while almost all of
// them hold nothing.
type Mailbox[T any] struct {
	mu     sync.Mutex
	events []T
	limit  int
	ready  chan struct{} // holds a token once an event is pushed
}

// New returns an empty mailbox that holds at most limit events.
func New[T any](limit int) *Mailbox[T] {
	return &Mailbox[T]{limit: limit, ready: make(chan struct{}, 1)}
}

// Push queues ev and reports whether there was room.
func (m *Mailbox[T]) Push(ev T) bool {
	m.mu.Lock()
	ok := len(m.events) < m.limit
	if ok {
		m.events = append(m.events, ev)
	}
	m.mu.Unlock()
	if ok {
		select {
		case m.ready <- struct{}{}:
		default:
		}
	}
	return ok
}

// Pop takes the oldest event; ok is false if none waits. A reader waits on
// Ready and then pops until none is left: a push after its last pop leaves
// a token.
func (m *Mailbox[T]) Pop() (ev T, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == 0 {
		return ev, false
	}
	ev = m.events[0]
	var zero T
	n := copy(m.events, m.events[1:])
	m.events[n] = zero
	m.events = m.events[:n]
	if n == 0 && cap(m.events) > 4 {
		m.events = nil // a burst is over: give its room back
	}
	return ev, true
}

// Ready holds a token once an event is pushed.
func (m *Mailbox[T]) Ready() <-chan struct{} { return m.ready }

// Len is the number of events waiting.
func (m *Mailbox[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}
