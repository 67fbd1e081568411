package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Valid reports whether the hold is still valid now (the ownership's Owns:
// the hold exists and the node lease is valid). The acknowledgement rule
// calls it after an upload returned, so it must read the clock then.
type Valid func() bool

// Start is where a stream begins: the head its database holds, the head's
// page checksums, and the segments (and their bytes) written since the
// last snapshot on the head's chain. The zero Start is an actor with no
// history in the bucket.
type Start struct {
	Head          history.Pos
	Sums          *history.Checksums
	SinceSnapshot int
	SinceBytes    int64
}

// Stream is one hold's replication of one actor: Ship after each event
// (and inside exec-durable), Snapshot after the event's answer, Close at
// the hold's end. It is used from the actor's goroutine, as its database is;
// only collection passes run on a goroutine of their own.
type Stream struct {
	r      *Replicas
	actor  history.Actor
	prefix string
	gen    uint64
	valid  Valid
	db     storage.Replicator

	head       history.Pos
	sums       *history.Checksums
	since      int
	sinceBytes int64
	err        error // set once the stream ended
	reset      *history.File
	// resetSnapped: the reset's snapshot is in the bucket (ResetSnapshot);
	// written before EraseHistory runs on a goroutine of its own.
	resetSnapped bool

	gcMu      sync.Mutex
	gcRunning bool
	gcNext    *history.Key
	gcCtx     context.Context
	gcStop    context.CancelFunc
	gcDone    chan struct{}
}

// NewStream starts a hold's stream of the actor at generation gen (the
// hold's), on db from start (Open's result, or the zero Start for an actor
// the bucket has no history of).
func (r *Replicas) NewStream(a history.Actor, gen uint64, valid Valid, db storage.Replicator, start Start) (*Stream, error) {
	prefix, err := history.Prefix(a)
	if err != nil {
		return nil, err
	}
	switch {
	case gen == 0:
		return nil, errors.New("replication: generation 0")
	case start.Head.Gen > gen:
		return nil, fmt.Errorf("replication: generation %d starts on a head written by generation %d", gen, start.Head.Gen)
	}
	sums := start.Sums
	if sums == nil {
		if start.Head.TXID != 0 {
			return nil, errors.New("replication: a start at a head without its checksums")
		}
		sums = &history.Checksums{}
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Stream{
		r: r, actor: a, prefix: prefix, gen: gen, valid: valid, db: db,
		head: start.Head, sums: sums, since: start.SinceSnapshot, sinceBytes: start.SinceBytes,
		gcCtx: ctx, gcStop: stop,
	}, nil
}

// Head is the position the bucket's history holds for this stream: the
// last acknowledged segment, or where it started.
func (s *Stream) Head() history.Pos { return s.head }

// Generation is the hold's generation, which every segment of the
// stream carries.
func (s *Stream) Generation() uint64 { return s.gen }

// Err is why the stream ended, nil while it runs.
func (s *Stream) Err() error { return s.err }

// Abandon ends the stream where it is, for err: what the database
// committed since the last Ship is never shipped, not even by Close. The
// caller gives the actor up when the bucket must not hold those commits
// (an alarm the index could not list): they are lost with the local copy,
// which no later hold uses unless it is the bucket's head.
func (s *Stream) Abandon(err error) { s.fail(err) }

// Shipped is one Ship's outcome.
type Shipped struct {
	// Key is the segment acknowledged; zero when there was nothing to ship.
	Key history.Key
	// Bytes is its size.
	Bytes int
}

type captured struct {
	info  storage.CaptureInfo
	pages []history.Page
}

// capture takes what the database committed since the last capture (all:
// every page as its last commit leaves it). An error leaves the capture
// position where it was.
func capture(ctx context.Context, db storage.Replicator, all bool) (captured, error) {
	var c captured
	f := db.Capture
	if all {
		f = db.CaptureAll
	}
	info, err := f(ctx, func(pgno uint32, data []byte) error {
		c.pages = append(c.pages, history.Page{Pgno: pgno, Data: bytes.Clone(data)})
		return nil
	})
	c.info = info
	return c, err
}

// Ship captures what the database committed since the last capture and
// ships it as one segment at the head's txid + 1, with this hold's
// generation and the head's as its parent, under the acknowledgement rule:
// acknowledged only if the conditional create succeeded and the hold was
// still valid when it returned. It does not checkpoint: a checkpoint's
// syncs stay off a durable write's path (Checkpoint, after the answer).
// The first segment of an actor the bucket has no history of holds every
// page (CaptureAll).
//
// A capture that fails leaves the stream as it was (its position did not
// move): the error is returned and the next Ship captures the same
// transactions and more. Any failure after it (an upload failed, late, of
// unknown outcome) ends the stream: the error wraps ErrLate, ErrUnknown or
// ErrExists, and the caller stops acting as owner.
func (s *Stream) Ship(ctx context.Context) (Shipped, error) {
	if s.err != nil {
		return Shipped{}, s.err
	}
	start := s.r.cfg.Clock.Now()
	c, err := capture(ctx, s.db, s.head.TXID == 0)
	if err != nil {
		return Shipped{}, fmt.Errorf("replication: capture %s: %w", s.actor, err)
	}
	if c.info.Transactions == 0 {
		return Shipped{}, nil
	}
	sh, err := s.shipCaptured(ctx, c)
	if err == nil {
		s.r.cfg.Metrics.durableWrite(s.r.cfg.Clock.Now().Sub(start))
	}
	return sh, err
}

// fail ends the stream with err.
func (s *Stream) fail(err error) error {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %w", ErrDone, err)
	}
	return err
}

// shipCaptured ships a capture already taken (its position moved: any
// failure ends the stream).
func (s *Stream) shipCaptured(ctx context.Context, c captured) (Shipped, error) {
	pre := s.sums.Sum()
	next := s.sums.Clone()
	post, err := next.Apply(c.info.PageSize, c.info.Pages, c.pages)
	if err != nil {
		return Shipped{}, s.fail(err)
	}
	txid := s.head.TXID + 1
	parent := s.head.Gen
	if txid == 1 {
		parent = 0
	}
	f := &history.File{
		PageSize: c.info.PageSize, Commit: c.info.Pages,
		MinTXID: txid, MaxTXID: txid, Timestamp: s.r.cfg.Clock.Now().UnixMilli(),
		PreApply: pre, PostApply: post, Pages: c.pages,
	}
	key := history.Key{Kind: history.Segment, TXID: txid, Gen: s.gen, Parent: parent}
	n, err := s.upload(ctx, key, f, UploadAttempts, 0)
	if err != nil {
		return Shipped{}, s.fail(err)
	}
	s.head, s.sums = key.Pos(), next
	s.since++
	s.sinceBytes += int64(n)
	s.r.waits.wrote(s.actor)
	return Shipped{Key: key, Bytes: n}, nil
}

// Checkpoint folds what the stream shipped into the database file and
// truncates the log (storage.Replicator.Checkpoint: never a commit not
// captured yet). The caller runs it after the event's answer, so its syncs
// are on no answer's path; an error is the next call's to retry.
func (s *Stream) Checkpoint(ctx context.Context) error { return s.db.Checkpoint(ctx) }

// upload encodes f and creates it at key under the acknowledgement rule:
// attempts attempts as a write is sent, or (attempts 1) a periodic
// snapshot's one attempt bounded by limit. It returns the size.
func (s *Stream) upload(ctx context.Context, key history.Key, f *history.File, attempts int, limit time.Duration) (int, error) {
	var buf bytes.Buffer
	if err := history.Encode(&buf, f); err != nil {
		return 0, err
	}
	data := buf.Bytes()
	first, total := attemptTimeout(len(data)), uploadTotal(len(data))
	if limit > 0 {
		first, total = min(first, limit), min(first, limit)
	}
	if err := create(ctx, s.r.cfg.Bucket, s.r.cfg.Clock, s.prefix+key.Rel(), data, attempts, first, total); err != nil {
		return 0, err
	}
	if !s.valid() {
		return 0, fmt.Errorf("%w: %s", ErrLate, key)
	}
	return len(data), nil
}

// Close ends the hold's stream (hibernation, a clean stop, a hand-over):
// it ships what is left and checkpoints, stops any collection pass before
// its next batch, and ends the stream. The caller then closes the database
// and releases the hold; an error means the last writes may not be in the
// bucket (the caller drops the instance all the same).
func (s *Stream) Close(ctx context.Context) error {
	var err error
	if s.err == nil && s.reset == nil {
		if _, err = s.Ship(ctx); err == nil {
			err = s.db.Checkpoint(ctx)
		}
	}
	s.stopCollecting()
	s.fail(errors.New("closed"))
	return err
}

// Snapshot takes a periodic snapshot when one is due: SnapshotSegments
// segments or SnapshotBytes of them since the last, and, after a failed
// one, once the book's wait passed (a write and SnapshotRetryWait, then 8
// writes, then 64). The caller runs it after the event's answer went out,
// on the actor's goroutine, never inside a durable write's wait. Its one
// attempt is bounded (5 s plus a second per megabyte, SnapshotAttemptMax);
// a failure costs no write and ends nothing (counted, tried again later).
// An acknowledged snapshot at a segment of this hold's starts a collection
// pass in the background. It reports whether a snapshot was acknowledged;
// an error is a capture's, or the failure of the segment it had to ship
// first (then the stream ended).
func (s *Stream) Snapshot(ctx context.Context) (bool, error) {
	if s.err != nil || s.reset != nil || s.head.TXID == 0 {
		return false, s.err
	}
	if s.since < SnapshotSegments && s.sinceBytes < SnapshotBytes {
		return false, nil
	}
	now := s.r.cfg.Clock.Now()
	if !s.r.waits.due(s.actor, now) {
		return false, nil
	}
	c, err := capture(ctx, s.db, true)
	if err != nil {
		return false, fmt.Errorf("replication: capture %s: %w", s.actor, err)
	}
	if c.info.Transactions > 0 {
		// Commits not shipped yet: they are captured now, so ship them
		// first (a segment of every page) and snapshot that head.
		if _, err := s.shipCaptured(ctx, c); err != nil {
			return false, err
		}
	}
	key := history.Key{Kind: history.Snapshot, TXID: s.head.TXID, Gen: s.head.Gen}
	f := &history.File{
		PageSize: c.info.PageSize, Commit: c.info.Pages,
		MinTXID: 1, MaxTXID: s.head.TXID, Timestamp: now.UnixMilli(),
		PostApply: s.sums.Sum(), Pages: c.pages,
	}
	if _, err := s.upload(ctx, key, f, 1, SnapshotAttemptMax); err != nil {
		s.r.cfg.Metrics.snapshotFailure()
		s.r.waits.failed(s.actor, s.r.cfg.Clock.Now())
		return false, nil
	}
	s.r.waits.succeeded(s.actor)
	s.since, s.sinceBytes = 0, 0
	if key.Gen == s.gen {
		s.collect(key)
	}
	return true, nil
}
