package callsign

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// record is the replay record: the nonces of the calls accepted that are
// not yet expired, at most capacity of them. Each is kept until its
// timestamp + Validity has passed, when a copy would be refused as expired
// anyway, and is then forgotten. The nonces are also in a min-heap by that
// time, so forgetting costs O(log n) per nonce, paid by the calls that
// come after, and never a scan of the record.
//
// The clock is read through a high-water mark: were the clock stepped
// back, a forgotten nonce would otherwise become valid again. So a call is
// too old if it is older than Validity at the latest time this record saw,
// and too new if it is ahead of now by more than Validity.
type record struct {
	clk      clock.Clock
	capacity int

	mu     sync.Mutex
	latest time.Time
	seen   map[[nonceLen]byte]struct{}
	byEnd  endHeap
}

type recEntry struct {
	end   int64 // Unix ms after which the nonce is expired: timestamp + Validity
	nonce [nonceLen]byte
}

func newRecord(clk clock.Clock, capacity int) *record {
	return &record{clk: clk, capacity: capacity, seen: map[[nonceLen]byte]struct{}{}}
}

// admit checks a good signature's timestamp and nonce, and records the
// nonce if the call is accepted.
func (r *record) admit(ts int64, nonce [nonceLen]byte) error {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forget(now)
	signed := time.UnixMilli(ts)
	if age := r.latest.Sub(signed); age > Validity {
		return fmt.Errorf("%w (signed %v ago, valid %v: a copy, or a clock off by that much?)", ErrExpired, age.Round(time.Millisecond), Validity)
	}
	if ahead := signed.Sub(now); ahead > Validity {
		return fmt.Errorf("%w (signed %v ahead of this clock, valid %v: a clock off by that much?)", ErrExpired, ahead.Round(time.Millisecond), Validity)
	}
	if _, ok := r.seen[nonce]; ok {
		return fmt.Errorf("%w (nonce seen %v ago)", ErrReplayed, r.latest.Sub(signed).Round(time.Millisecond))
	}
	if len(r.seen) >= r.capacity {
		return fmt.Errorf("%w (%d nonces, none expired yet: over %d calls in %v)", ErrReplayFull, len(r.seen), r.capacity, Validity)
	}
	r.seen[nonce] = struct{}{}
	heap.Push(&r.byEnd, recEntry{end: ts + Validity.Milliseconds(), nonce: nonce})
	return nil
}

// forget moves the high-water mark to now (if later) and drops every nonce
// expired by then; r.mu is held.
func (r *record) forget(now time.Time) {
	if now.After(r.latest) {
		r.latest = now
	}
	for len(r.byEnd) > 0 && r.latest.After(time.UnixMilli(r.byEnd[0].end)) {
		e := heap.Pop(&r.byEnd).(recEntry)
		delete(r.seen, e.nonce)
	}
}

func (r *record) size() int {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forget(now)
	return len(r.seen)
}

// endHeap orders entries by end, earliest first (container/heap).
type endHeap []recEntry

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(recEntry)) }
func (h *endHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
