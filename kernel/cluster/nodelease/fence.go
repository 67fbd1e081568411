package nodelease

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// FenceOutcome is what TryFence did.
type FenceOutcome int

const (
	NotDue        FenceOutcome = iota // this lease is not valid, or the watch is not complete
	Alive                             // the peer wrote since it was watched: the watch starts again
	NotYet                            // unchanged, but its written_at + ttl + grace has not passed here
	NotLive                           // fenced or released already, absent, or not a format-3 object
	FenceWritten                      // this node wrote the fence
	FencedByOther                     // another writer fenced it first
)

var outcomeNames = [...]string{"not due", "alive", "not yet", "not live", "fenced", "fenced by another"}

func (o FenceOutcome) String() string { return outcomeNames[o] }

type watched struct {
	instance  string
	seq       uint64
	writtenAt time.Time
	since     time.Time // when this node first saw that write
}

// Fencer watches peers' leases and fences one that stopped renewing
// (book ADR 0020 section 2). The heartbeat listing feeds it bodies
// (Observe); TryFence decides on one versioned GET of its own.
type Fencer struct {
	l     *Lease
	mu    sync.Mutex
	peers map[string]watched
}

// Fencer returns a fencer acting for this node's lease.
func (l *Lease) Fencer() *Fencer { return &Fencer{l: l, peers: map[string]watched{}} }

// Observe records a body of nodes/<id> as listed now. A body that is not a
// live format-3 object, or another write than the one watched, starts the
// watch again (or ends it).
func (f *Fencer) Observe(id string, body []byte) {
	o, err := Decode(body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || o.State != Live {
		delete(f.peers, id)
		return
	}
	w, ok := f.peers[id]
	if ok && w.instance == o.Instance && w.seq == o.Seq && w.writtenAt.Equal(o.WrittenAt) {
		return
	}
	f.peers[id] = watched{instance: o.Instance, seq: o.Seq, writtenAt: o.WrittenAt, since: f.l.clk.Now()}
}

// Due reports whether id's object was seen unchanged for a lease period
// plus one attempt timeout, counted from no earlier than this node's
// first acknowledged write after its last lapse, and this lease is valid.
func (f *Fencer) Due(id string) bool {
	f.mu.Lock()
	w, ok := f.peers[id]
	f.mu.Unlock()
	return ok && f.due(w)
}

func (f *Fencer) due(w watched) bool {
	from := f.l.WatchFrom()
	if from.IsZero() || !f.l.Valid() {
		return false
	}
	if w.since.After(from) {
		from = w.since
	}
	return !f.l.clk.Now().Before(from.Add(f.l.s.Watch()))
}

// TryFence fences peer id if its watch is complete: one versioned GET,
// and on that read alone, if it is the write watched and its written_at +
// ttl + grace has passed on this clock, a fence If-Match on the GET's
// version, keeping the peer's instance, seq and written_at.
func (f *Fencer) TryFence(ctx context.Context, id string) (FenceOutcome, error) {
	f.mu.Lock()
	w, ok := f.peers[id]
	f.mu.Unlock()
	if !ok || !f.due(w) {
		return NotDue, nil
	}
	r, err := f.l.readPeer(ctx, id)
	if err != nil {
		return NotDue, err
	}
	if !r.live() {
		f.forget(id)
		return NotLive, nil
	}
	o := r.Object
	if o.Instance != w.instance || o.Seq != w.seq || !o.WrittenAt.Equal(w.writtenAt) {
		f.Observe(id, r.Body)
		return Alive, nil
	}
	if f.l.clk.Now().Before(o.WrittenAt.Add(f.l.s.Takeover())) {
		return NotYet, nil
	}
	if !f.l.Valid() {
		return NotDue, nil
	}
	o.State = Fenced
	err = f.l.attempt(ctx, func(ctx context.Context) error {
		_, err := writeObject(ctx, f.l.b, id, o, bucket.Condition{IfVersion: r.Version})
		return err
	})
	if err == nil {
		f.forget(id)
		return FenceWritten, nil
	}
	if !errors.Is(err, bucket.ErrPrecondition) {
		return NotDue, err
	}
	r, err = f.l.readPeer(ctx, id)
	if err != nil {
		return NotDue, err
	}
	if r.Found && r.Err == nil && r.Object.State == Fenced {
		f.forget(id)
		return FencedByOther, nil
	}
	f.Observe(id, r.Body)
	return Alive, nil
}

func (f *Fencer) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.peers, id)
}

func (l *Lease) readPeer(ctx context.Context, id string) (r Read, err error) {
	err = l.attempt(ctx, func(ctx context.Context) error {
		r, err = ReadObject(ctx, l.b, id)
		return err
	})
	return r, err
}
