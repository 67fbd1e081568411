package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// snapshotWaits is what a node remembers of failed periodic snapshots,
// while an actor is idle too (the book: waking it does not try again
// early); a node that restarts or takes an actor over knows of no wait.
type snapshotWaits struct {
	mu sync.Mutex
	m  map[history.Actor]*snapshotWait
}

type snapshotWait struct {
	failures int       // in a row
	at       time.Time // of the last failure
	writes   int       // segments shipped since
}

func newSnapshotWaits() *snapshotWaits {
	return &snapshotWaits{m: map[history.Actor]*snapshotWait{}}
}

// retryWrites is how many writes after the n-th failure in a row the next
// try waits for.
func retryWrites(n int) int {
	switch n {
	case 1:
		return 1
	case 2:
		return 8
	}
	return SnapshotSegments
}

func (w *snapshotWaits) due(a history.Actor, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	x, ok := w.m[a]
	return !ok || (x.writes >= retryWrites(x.failures) && now.Sub(x.at) >= SnapshotRetryWait)
}

func (w *snapshotWaits) wrote(a history.Actor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x, ok := w.m[a]; ok {
		x.writes++
	}
}

func (w *snapshotWaits) failed(a history.Actor, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x, ok := w.m[a]
	if !ok {
		x = &snapshotWait{}
		w.m[a] = x
	}
	x.failures++
	x.at, x.writes = now, 0
}

func (w *snapshotWaits) succeeded(a history.Actor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, a)
}

// collect asks for a collection pass after snap, an acknowledged snapshot
// of this hold's: one pass at a time; a request while one runs waits,
// replaced by any newer one, and runs after it.
func (s *Stream) collect(snap history.Key) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	if s.gcRunning {
		s.gcNext = &snap
		return
	}
	s.gcRunning = true
	s.gcDone = make(chan struct{})
	go s.collector(snap)
}

func (s *Stream) collector(snap history.Key) {
	defer close(s.gcDone)
	for {
		if _, err := s.pass(s.gcCtx, snap, s.r.cfg.Retention); err != nil && s.gcCtx.Err() == nil {
			s.r.cfg.Metrics.collectFailure()
		}
		s.gcMu.Lock()
		next := s.gcNext
		s.gcNext = nil
		if next == nil || s.gcCtx.Err() != nil {
			s.gcRunning = false
			s.gcMu.Unlock()
			return
		}
		snap = *next
		s.gcMu.Unlock()
	}
}

// stopCollecting stops a pass before its next batch and waits for it.
func (s *Stream) stopCollecting() {
	s.gcStop()
	s.gcMu.Lock()
	running, done := s.gcRunning, s.gcDone
	s.gcMu.Unlock()
	if running {
		<-done
	}
}

// pass is one collection pass (book ADR 0012): one listing, the
// collectable keys (history.Collectable), deleted in batches of
// DeleteBatch with the hold checked valid before each. It returns how many
// it deleted.
func (s *Stream) pass(ctx context.Context, snap history.Key, retention time.Duration) (int, error) {
	entries, err := list(ctx, s.r.cfg.Bucket, s.r.cfg.Clock, s.prefix)
	if err != nil {
		return 0, err
	}
	l, err := history.ParseListing(s.prefix, entries)
	if err != nil {
		return 0, err
	}
	objs, err := history.Collectable(l, s.gen, snap, retention, s.r.cfg.Clock.Now())
	if err != nil {
		return 0, err
	}
	n := 0
	defer func() { s.r.cfg.Metrics.collected(n) }()
	for i, o := range objs {
		if i%DeleteBatch == 0 && (!s.valid() || ctx.Err() != nil) {
			return n, fmt.Errorf("replication: collection of %s stopped: the hold ended", s.actor)
		}
		dctx, cancel := clock.WithTimeout(ctx, s.r.cfg.Clock, attemptTimeout(0))
		err := s.r.cfg.Bucket.Delete(dctx, o.Entry.Key, bucket.Condition{})
		cancel()
		if err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return n, fmt.Errorf("replication: collect %s: %w", o.Entry.Key, err)
		}
		n++
	}
	return n, nil
}

// Reset is a delete's reset (book ADR 0028 section 1): one segment holding
// every page of empty, an empty database the node built in scratch space
// (with whatever host state the delete carries), on this stream's head at
// its generation, so the chain ends in the empty state. It returns nil
// only once the bucket acknowledged it under the acknowledgement rule (the
// delete is then recorded); a failure ends the stream as Ship's does. After
// it the stream ships nothing (ErrDeleted): the node removes the local
// files, calls Erase off the event's path, and gives the actor up.
func (s *Stream) Reset(ctx context.Context, empty storage.Replicator) error {
	if s.err != nil {
		return s.err
	}
	if s.reset != nil {
		return ErrDeleted
	}
	c, err := capture(ctx, empty, true)
	if err != nil {
		return fmt.Errorf("replication: capture the empty database: %w", err)
	}
	if _, err := s.shipCaptured(ctx, c); err != nil {
		return err
	}
	s.reset = &history.File{
		PageSize: c.info.PageSize, Commit: c.info.Pages,
		MinTXID: 1, MaxTXID: s.head.TXID, PostApply: s.sums.Sum(), Pages: c.pages,
	}
	s.err = fmt.Errorf("%w: %w", ErrDone, ErrDeleted)
	return nil
}

// Erase follows an acknowledged Reset, off the event's path: ResetSnapshot,
// then EraseHistory.
func (s *Stream) Erase(ctx context.Context) error {
	if err := s.ResetSnapshot(ctx); err != nil {
		return err
	}
	return s.EraseHistory(ctx)
}

// ResetSnapshot follows an acknowledged Reset: the snapshot of the empty
// database at the reset, sent as a write is. Once it is in the bucket a
// restore plans from it alone (a snapshot at the head's position), so the
// actor may be opened again at once, under this hold, while EraseHistory
// deletes what lies before it. A failure is counted (a snapshot's, a
// collection's).
func (s *Stream) ResetSnapshot(ctx context.Context) error {
	if s.reset == nil {
		return errors.New("replication: erase without an acknowledged reset")
	}
	s.reset.Timestamp = s.r.cfg.Clock.Now().UnixMilli()
	if _, err := s.upload(ctx, s.resetSnapshot(), s.reset, UploadAttempts, 0); err != nil {
		s.r.cfg.Metrics.snapshotFailure()
		s.r.cfg.Metrics.collectFailure()
		return err
	}
	s.resetSnapped = true
	return nil
}

func (s *Stream) resetSnapshot() history.Key {
	return history.Key{Kind: history.Snapshot, TXID: s.head.TXID, Gen: s.gen}
}

// EraseHistory follows ResetSnapshot: the history before the reset's
// snapshot collected with no retention window, up to EraseTries passes a
// second apart while the bucket refuses and the hold is valid. What
// remains is the reset segment and that snapshot, and whatever a stream
// opened afterwards under the same hold wrote after them (never
// collected: history.Collectable keeps the holder's segments after its
// snapshot). A failure is counted (a collection's) and leaves old objects
// no restore uses.
func (s *Stream) EraseHistory(ctx context.Context) error {
	if !s.resetSnapped {
		return errors.New("replication: erase before the reset's snapshot is in the bucket")
	}
	var err error
	for try := 0; try < EraseTries && s.valid(); try++ { // only under the hold
		if try > 0 {
			if serr := clock.Sleep(ctx, s.r.cfg.Clock, time.Second); serr != nil {
				break
			}
		}
		if _, err = s.pass(ctx, s.resetSnapshot(), 0); err == nil || !s.valid() {
			break
		}
	}
	if err != nil {
		s.r.cfg.Metrics.collectFailure()
	}
	return err
}
