package deploys

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/backoff"
)

// UpdateTimeout is a follower's default bound on one update.
const UpdateTimeout = time.Minute

// FollowerConfig is what a Follower follows and whom it tells.
type FollowerConfig struct {
	Bucket bucket.Bucket
	App    app.Name
	Dir    string      // where Load writes modules
	Clock  clock.Clock // [clock.Real]
	// Period is how often current is read [3 s, the heartbeat period].
	Period time.Duration
	// MaxBackoff bounds how long a current whose update failed waits to be
	// tried again, Period doubled per failure [5 min].
	MaxBackoff time.Duration
	// Timeout bounds each update, the read of current and the version's
	// load, so a bucket request that never answers stops no follower for
	// good [1 min].
	Timeout time.Duration
	// Apply swaps a loaded version in; it is called only when current's
	// version or seq changed from the last one applied. An error keeps
	// the previous version applied and backs off.
	Apply func(context.Context, Loaded) error
	// OnState, if set, is told the state after every read of current.
	OnState func(State)
	// Applied is the version the node already serves (loaded before it
	// started), zero for none: the first read applies only another one.
	Applied Current
}

// State is what a Follower has applied and how its last reads went.
type State struct {
	Applied  Current // zero until a version is applied
	Err      error   // the last read's or update's error, nil once one succeeds; set while Failures > 0
	Failures int     // failed updates in a row (reads of current that fail are Unread)
	// Unread is the reads of current that failed in a row, 0 once one
	// succeeds: a node that cannot read current serves what it has, and
	// after a while should say so.
	Unread int
	// Deleted: the app's tombstone is in the bucket (app delete): the
	// node stops serving it.
	Deleted bool
}

// Follower reads an app's current every Period and applies each new
// version. After a failed update (the version could not be loaded or
// applied) it goes on reading current every Period: a current other than
// the one that failed (a fix, a rollback) is tried at once, the same one
// (version and seq) only once Period doubled per failure of it, up to
// MaxBackoff, has passed: a version that fails to build is not rebuilt
// every poll.
type Follower struct {
	cfg  FollowerConfig
	wake chan struct{}

	mu    sync.Mutex
	state State

	// Run's alone: the current whose update failed, its error, its
	// failures in a row, and when it may be tried again.
	failed backoff.Failed[Current]
}

// NewFollower returns a Follower; Run starts it.
func NewFollower(cfg FollowerConfig) *Follower {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Period <= 0 {
		cfg.Period = 3 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = UpdateTimeout
	}
	return &Follower{cfg: cfg, wake: make(chan struct{}, 1), state: State{Applied: cfg.Applied}}
}

// Wake makes the follower read current at once (an actor recorded a seq
// above the node's); a current whose update failed is still not tried
// again before its backoff ends.
func (f *Follower) Wake() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// State is the follower's state now.
func (f *Follower) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// Run reads current at once, then every Period or when woken, until ctx is
// done.
func (f *Follower) Run(ctx context.Context) error {
	for {
		select { // this read answers a wake-up that came meanwhile
		case <-f.wake:
		default:
		}
		f.poll(ctx)
		t := f.cfg.Clock.NewTimer(f.cfg.Period)
		select {
		case <-t.C():
		case <-f.wake:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// prune removes the modules in dir that l does not use: dir holds the
// version served, not every version the node ever ran (a rollback loads
// its modules again). A file it cannot remove stays, harmlessly.
func prune(dir string, l Loaded) {
	keep := map[string]bool{l.Front: true}
	for _, c := range l.Classes {
		keep[c.Module] = true
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	for _, f := range files {
		if !keep[f] {
			os.Remove(f)
		}
	}
}

// poll reads current and applies it if it changed, unless it is the one
// that failed and its backoff has not ended; it reports the state once the
// read's timeout is released.
func (f *Follower) poll(ctx context.Context) State {
	s := f.update(ctx)
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	if f.cfg.OnState != nil {
		f.cfg.OnState(s)
	}
	return s
}

func (f *Follower) update(ctx context.Context) State {
	ctx, cancel := clock.WithTimeout(ctx, f.cfg.Clock, f.cfg.Timeout)
	defer cancel()
	s := f.State()
	if errors.Is(RefuseDeleted(ctx, f.cfg.Bucket, f.cfg.App), ErrAppDeleted) { // one that cannot be read: the next poll
		return State{Applied: s.Applied, Deleted: true}
	}
	cur, _, found, err := readCurrent(ctx, f.cfg.Bucket, keysOf(f.cfg.App))
	if err != nil {
		s.Err = err
		s.Unread++
		return s
	}
	s.Unread = 0
	if !found || cur == s.Applied {
		f.failed.Clear()
		return State{Applied: s.Applied}
	}
	if err, waiting := f.failed.Waiting(cur, f.cfg.Clock.Now()); waiting {
		s.Err = err // not tried again yet: the update's error stands
		return s
	}
	var l Loaded
	if l, err = loadAt(ctx, f.cfg.Bucket, f.cfg.App, cur, f.cfg.Dir); err == nil {
		err = f.cfg.Apply(ctx, l)
	}
	if err == nil {
		f.failed.Clear()
		prune(f.cfg.Dir, l)
		return State{Applied: cur}
	}
	f.failed.Record(cur, err, f.cfg.Clock.Now(), f.cfg.Period, f.cfg.MaxBackoff)
	s.Err = err
	s.Failures++
	return s
}
