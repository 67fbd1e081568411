package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/backoff"
)

// A node's follower of its app's secrets (the book's ADR 0016, "Nodes";
// ADR 1050): it opens the set current names before the node serves, then
// reads current every period, with its own backoff, apart from the deploy
// follower, so neither delays the other. It keeps the highest seq it opened
// and never goes back to a lower one. It tells the node to fail closed at
// once on a set it cannot open (no key, another key, an altered object, one
// sealed for another place) and after Window on one it cannot reach while
// current answers (the object missing or unreadable, current corrupt, a
// lower seq); a bucket that does not answer keeps the set it has (every
// node shares the outage, which already stops leases).

// FollowerConfig is what a Follower follows and whom it tells.
type FollowerConfig struct {
	Bucket bucket.Bucket
	Place  Place
	Keys   []Key       // none: the node fails closed once the app has secrets
	Clock  clock.Clock // [clock.Real] the node's
	// Period is how often current is read [3 s, the heartbeat period].
	Period time.Duration
	// MaxBackoff bounds how long an object that could not be opened waits
	// to be read again, Period doubled per failure [10 s]: within the
	// window, so a read that failed once is tried again before it ends.
	// Another seq in current (a fix: secrets reset) is read at once.
	MaxBackoff time.Duration
	// Window is how long the set current names may stay unopened, while
	// the bucket answers, before the node fails closed [30 s].
	Window time.Duration
	// Timeout bounds each read, so a request that never answers stops no
	// follower [10 s].
	Timeout time.Duration
	// Opened is given each set opened with a seq above the last (the first
	// may be the zero Current: the app has no secrets).
	Opened func(Current)
	// Blocked is told why the node must fail closed, once per change of
	// reason, and nil once it may serve again.
	Blocked func(error)
}

// Follower follows an app's secrets. Start opens the set, then Run follows.
type Follower struct {
	cfg FollowerConfig

	// Run's alone (Start's before it).
	opened   bool      // a set was opened since the start (the zero one counts)
	seq      uint64    // the highest seq opened
	lastGood time.Time // the window's start (poll)
	blocked  error     // the reason last given to Blocked
	// The seq whose object could not be opened, read again after a wait.
	failed backoff.Failed[uint64]
}

// NewFollower returns a Follower; Start opens the first set.
func NewFollower(cfg FollowerConfig) *Follower {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Period <= 0 {
		cfg.Period = 3 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = 30 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &Follower{cfg: cfg}
}

// Start reads the set once, before the node serves: it is opened (Opened)
// or the node starts failed closed (Blocked), since no event may run
// without the set. A node calls it again once built, before it serves:
// the set may have changed while its classes compiled.
func (f *Follower) Start(ctx context.Context) { f.poll(ctx) }

// Run reads current every period until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	for {
		if err := clock.Sleep(ctx, f.cfg.Clock, f.cfg.Period); err != nil {
			return err
		}
		f.poll(ctx)
	}
}

// errLower: current names a seq below one this node opened (a bucket
// restored from a backup; a rollback attempt).
var errLower = errors.New("below the highest seq this node opened: refused (restart the node after restoring the bucket)")

func (f *Follower) poll(ctx context.Context) {
	ctx, cancel := clock.WithTimeout(ctx, f.cfg.Clock, f.cfg.Timeout)
	defer cancel()
	now := f.cfg.Clock.Now()
	err := f.read(ctx, now)
	switch {
	case err == nil:
		f.lastGood = now
		f.block(nil)
	case errors.Is(err, errOutage) && f.opened:
		// Every node shares the outage: the node keeps its set and stays
		// as it is. The window runs while the bucket answers: an outage
		// that ends on a set not opened yet does not block at once.
		if f.blocked == nil {
			f.lastGood = now
		}
	case !f.opened, cannotOpen(err):
		f.block(err)
	case now.Sub(f.lastGood) >= f.cfg.Window:
		f.block(fmt.Errorf("the set current names was not opened within %s: %w", f.cfg.Window, err))
	}
}

// errOutage marks a read of current the bucket did not answer.
var errOutage = errors.New("the bucket did not answer")

// FoundCurrent reports whether reason, given to Blocked, came after
// current was read: the app has secrets.
func FoundCurrent(reason error) bool { return reason != nil && !errors.Is(reason, errOutage) }

// read opens the set current names unless it is the one held; nil when the
// node holds the set current names.
func (f *Follower) read(ctx context.Context, now time.Time) error {
	p := f.cfg.Place
	seq, _, found, err := readCurrent(ctx, f.cfg.Bucket, p)
	switch {
	case err != nil && !errors.Is(err, ErrCorruptCurrent):
		return fmt.Errorf("reading %s: %w: %w", p.currentKey(), errOutage, err)
	case err != nil:
		return err
	case !found && f.opened:
		return nil // current deleted by hand: the node keeps the set it has
	case !found:
		f.opened = true
		f.cfg.Opened(Current{})
		return nil
	case f.opened && seq == f.seq:
		return nil
	case seq < f.seq:
		return fmt.Errorf("%s names seq %d, %w (%d)", p.currentKey(), seq, errLower, f.seq)
	}
	if err, waiting := f.failed.Waiting(seq, now); waiting {
		return err // not read again yet: its error stands
	}
	c, err := readObject(ctx, f.cfg.Bucket, p, f.cfg.Keys, seq)
	if err != nil {
		f.failed.Record(seq, err, now, f.cfg.Period, f.cfg.MaxBackoff)
		return err
	}
	f.failed.Clear()
	f.opened, f.seq = true, c.Seq
	f.cfg.Opened(c)
	return nil
}

// cannotOpen reports a set this node cannot open however long it waits.
func cannotOpen(err error) bool {
	return errors.Is(err, ErrNoKey) || errors.Is(err, ErrOtherKey) || errors.Is(err, ErrAltered) || errors.Is(err, ErrOtherPlace)
}

// block tells Blocked of a change of reason.
func (f *Follower) block(reason error) {
	if reason == nil && f.blocked == nil || reason != nil && f.blocked != nil && reason.Error() == f.blocked.Error() {
		return
	}
	f.blocked = reason
	f.cfg.Blocked(reason)
}
