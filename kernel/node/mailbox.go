package node

import "sync"

// mailbox is an actor's queue of waiting events, at most limit of them. It
// holds memory only for what waits: a node keeps one per resident actor, and
// a channel buffered to the limit would set aside 8 KiB for each (1,024
// pointers) while almost all of them hold nothing.
type mailbox struct {
	mu     sync.Mutex
	events []*event
	limit  int
	ready  chan struct{} // holds a token once an event is pushed
}

func newMailbox(limit int) *mailbox {
	return &mailbox{limit: limit, ready: make(chan struct{}, 1)}
}

// push queues ev and reports whether there was room.
func (m *mailbox) push(ev *event) bool {
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

// pop takes the oldest event, or returns nil if none waits. A reader waits
// on ready and then pops until nil: a push after its last pop leaves a token.
func (m *mailbox) pop() *event {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == 0 {
		return nil
	}
	ev := m.events[0]
	n := copy(m.events, m.events[1:])
	m.events[n] = nil
	m.events = m.events[:n]
	if n == 0 && cap(m.events) > 4 {
		m.events = nil // a burst is over: give its room back
	}
	return ev
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}
