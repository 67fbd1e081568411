package placement

import (
	"container/list"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// HintTTL is how long an owner learned from an actor's record may route
// its requests (the book: the owner hint, at most 1 s): a forwarded
// request then costs at most one bucket GET per actor per second.
const HintTTL = time.Second

// MaxHints bounds the hints a node keeps; past it the oldest is dropped.
const MaxHints = 1 << 16

// Hints are actors' owners as their records named them, each kept for
// HintTTL on the node's clock. A hint only routes an outside request
// (Routed): it never decides that this node leaves an actor alone.
type Hints struct {
	clock clock.Clock
	max   int

	mu      sync.Mutex
	byActor map[ownership.Actor]*list.Element
	order   *list.List // of *hint, oldest first
}

type hint struct {
	actor ownership.Actor
	rec   ownership.Record
	at    time.Time
}

// NewHints keeps at most max hints on c.
func NewHints(c clock.Clock, max int) *Hints {
	return &Hints{clock: c, max: max, byActor: map[ownership.Actor]*list.Element{}, order: list.New()}
}

// Get returns a's hint if it was learned less than HintTTL ago.
func (h *Hints) Get(a ownership.Actor) (ownership.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.byActor[a]
	if !ok {
		return ownership.Record{}, false
	}
	if h.expired(e, h.clock.Now()) {
		h.remove(e)
		return ownership.Record{}, false
	}
	return e.Value.(*hint).rec, true
}

// Put keeps rec as a's owner from now, dropping the expired hints and,
// at the bound, the oldest.
func (h *Hints) Put(a ownership.Actor, rec ownership.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.byActor[a]; ok {
		h.remove(e)
	}
	now := h.clock.Now()
	for f := h.order.Front(); f != nil && (h.order.Len() >= h.max || h.expired(f, now)); f = h.order.Front() {
		h.remove(f)
	}
	h.byActor[a] = h.order.PushBack(&hint{actor: a, rec: rec, at: now})
}

// Forget drops a's hint, if any.
func (h *Hints) Forget(a ownership.Actor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.byActor[a]; ok {
		h.remove(e)
	}
}

func (h *Hints) expired(e *list.Element, now time.Time) bool {
	return now.Sub(e.Value.(*hint).at) >= HintTTL
}

func (h *Hints) remove(e *list.Element) {
	delete(h.byActor, e.Value.(*hint).actor)
	h.order.Remove(e)
}
