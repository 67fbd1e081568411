package deploys

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
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
	// MaxBackoff bounds the wait after failed updates, which doubles from
	// Period [5 min].
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

// State is what a Follower has applied and how its last read went.
type State struct {
	Applied  Current // zero until a version is applied
	Err      error   // the last read's or update's error, nil once one succeeds
	Failures int     // failed updates in a row (reads of current that fail are not counted)
}

// Follower reads an app's current every Period and applies each new
// version. After a failed update (the version could not be loaded or
// applied) it waits Period doubled per failure, up to MaxBackoff, before
// it tries again, wake-ups included: a version that fails to build is not
// rebuilt every poll.
type Follower struct {
	cfg  FollowerConfig
	wake chan struct{}

	mu    sync.Mutex
	state State
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
// above the node's), unless it is backing off.
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

// Run reads current at once, then every Period, until ctx is done.
func (f *Follower) Run(ctx context.Context) error {
	var wait time.Duration
	for {
		if wait > 0 {
			wake := f.wake
			if f.State().Failures > 0 {
				wake = nil // a wake-up does not cut a backoff short
			}
			t := f.cfg.Clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-wake:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			t.Stop()
		}
		select { // this read answers a wake-up that came meanwhile
		case <-f.wake:
		default:
		}
		s := f.poll(ctx)
		wait = f.cfg.Period
		for range s.Failures {
			wait = min(2*wait, f.cfg.MaxBackoff)
		}
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

// poll reads current and applies it if it changed.
func (f *Follower) poll(ctx context.Context) State {
	ctx, cancel := clock.WithTimeout(ctx, f.cfg.Clock, f.cfg.Timeout)
	defer cancel()
	s := f.State()
	cur, _, found, err := readCurrent(ctx, f.cfg.Bucket, keysOf(f.cfg.App))
	switch {
	case err != nil:
		s.Err = err
	case !found || cur == s.Applied:
		s.Err = nil
		s.Failures = 0
	default:
		var l Loaded
		if l, err = loadAt(ctx, f.cfg.Bucket, f.cfg.App, cur, f.cfg.Dir); err == nil {
			err = f.cfg.Apply(ctx, l)
		}
		if err != nil {
			s.Err = err
			s.Failures++
		} else {
			s = State{Applied: cur}
			prune(f.cfg.Dir, l)
		}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	if f.cfg.OnState != nil {
		f.cfg.OnState(s)
	}
	return s
}
