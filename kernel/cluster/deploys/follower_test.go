package deploys

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

type stateAt struct {
	State
	at time.Time
}

// armed waits for the follower to wait on its timer again, after a read.
func armed(t *testing.T, m *clock.Manual) time.Duration {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); m.Armed() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the follower never waited again")
		}
	}
	next, _ := m.Next()
	return next.Sub(m.Now())
}

// next is the next state reported, failing the test after 10 s: a read
// that does not come (a wake-up ignored) fails rather than hangs.
func next(t *testing.T, states chan stateAt) stateAt {
	t.Helper()
	select {
	case s := <-states:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no read of current came")
		return stateAt{}
	}
}

// startFollower runs a follower on b from v1 with a manual clock: Apply
// fails while fail is set; every Apply and state is sent on the channels.
func startFollower(t *testing.T, b bucket.Bucket, cfg FollowerConfig) (f *Follower, m *clock.Manual, fail *atomic.Bool, applied chan Loaded, states chan stateAt) {
	m = clock.NewManual(time.Unix(1e9, 0))
	fail = new(atomic.Bool)
	applied, states = make(chan Loaded, 10), make(chan stateAt, 10)
	cfg.Bucket, cfg.App, cfg.Dir, cfg.Clock = b, shop, t.TempDir(), m
	cfg.Apply = func(_ context.Context, l Loaded) error {
		applied <- l
		if fail.Load() {
			return errors.New("does not build")
		}
		return nil
	}
	cfg.OnState = func(s State) { states <- stateAt{s, m.Now()} }
	f = NewFollower(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f, m, fail, applied, states
}

// The follower applies a version once, when current changes, and reads at
// once when woken.
func TestFollower(t *testing.T) {
	b := newBucket()
	v1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}}).To
	f, m, _, applied, states := startFollower(t, b, FollowerConfig{})
	if s := <-states; s.Applied != v1 || s.Err != nil || (<-applied).Version != v1.Version {
		t.Fatalf("first read: %+v", s)
	}
	if d := armed(t, m); d != 3*time.Second {
		t.Errorf("waits %v after a read; want the 3 s period", d)
	}
	m.Advance(3 * time.Second)
	if s := <-states; s.Applied != v1 || len(applied) != 0 {
		t.Fatalf("an unchanged current: %+v, %d applied", s, len(applied))
	}
	armed(t, m)
	v2 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("2")}}).To
	f.Wake()
	if s := <-states; s.Applied != v2 || (<-applied).Seq != 2 || f.State().Applied != v2 {
		t.Fatalf("woken after a deploy: %+v", s)
	}
}

// After a failed update the follower goes on reading current every
// period: the same current is tried again only after its backoff
// (doubling, wake-ups included), a different one (a fix) at once.
func TestFollowerBackoff(t *testing.T) {
	b := newBucket()
	v1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}}).To
	f, m, fail, applied, states := startFollower(t, b, FollowerConfig{})
	next(t, states)
	<-applied
	armed(t, m)

	fail.Store(true)
	publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("2")}})
	f.Wake()
	s := next(t, states)
	<-applied
	if s.Applied != v1 || s.Err == nil || s.Failures != 1 {
		t.Fatalf("a failed update: %+v", s)
	}
	failedAt := s.at
	if d := armed(t, m); d != 3*time.Second {
		t.Errorf("waits %v to read current after a failure; want the 3 s period", d)
	}
	// Reads within the 6 s backoff, woken or not, do not try it again.
	f.Wake()
	for _, at := range []time.Duration{0, 3 * time.Second} {
		s := next(t, states)
		if len(applied) != 0 || s.Failures != 1 || s.Err == nil || s.Applied != v1 || !s.at.Equal(failedAt.Add(at)) {
			t.Fatalf("a read %v after the failure: %+v, %d applied; want a read, no try", at, s, len(applied))
		}
		armed(t, m)
		m.Advance(3 * time.Second)
	}
	if s := next(t, states); s.Failures != 2 || len(applied) != 1 || !s.at.Equal(failedAt.Add(6*time.Second)) {
		t.Fatalf("tried again %v after the failure, %d failures; want after the 6 s backoff, 2", s.at.Sub(failedAt), s.Failures)
	}
	<-applied
	armed(t, m)

	// A fix lands during the 12 s backoff: tried at the next read.
	fail.Store(false)
	v3 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("3")}}).To
	m.Advance(3 * time.Second)
	if s := next(t, states); s.Applied != v3 || s.Err != nil || s.Failures != 0 || len(applied) != 1 {
		t.Fatalf("a fix during the backoff, read 3 s in: %+v", s)
	}
}

// The backoff of a current stops doubling at MaxBackoff.
func TestFollowerBackoffBound(t *testing.T) {
	b := newBucket()
	publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}})
	_, m, fail, applied, states := startFollower(t, b, FollowerConfig{Period: time.Second, MaxBackoff: 5 * time.Second})
	fail.Store(true)
	var tries []time.Duration
	start := m.Now()
	for m.Now().Sub(start) < 20*time.Second {
		<-states
		if len(applied) > 0 {
			<-applied
			tries = append(tries, m.Now().Sub(start))
		}
		armed(t, m)
		m.Advance(time.Second)
	}
	want := []time.Duration{0, 2 * time.Second, 6 * time.Second, 11 * time.Second, 16 * time.Second}
	if !slices.Equal(tries, want) {
		t.Errorf("tried at %v; want %v (backoffs 2, 4, then 5 s)", tries, want)
	}
}

// flaky fails reads of current while failing is set.
type flaky struct {
	*buckettest.Memory
	failing atomic.Bool
}

func (f *flaky) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if strings.HasSuffix(key, "/current") && f.failing.Load() {
		return nil, errors.New("access denied")
	}
	return f.Memory.Get(ctx, key, opts)
}

// Unread counts the failed reads of current in a row, apart from the
// failed updates, and a read that succeeds resets it.
func TestFollowerUnread(t *testing.T) {
	b := &flaky{Memory: newBucket()}
	v1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}}).To
	f := NewFollower(FollowerConfig{Bucket: b, App: shop, Dir: t.TempDir(), Apply: func(context.Context, Loaded) error { return nil }})
	f.poll(t.Context())
	b.failing.Store(true)
	for i := 1; i <= 3; i++ {
		if s := f.poll(t.Context()); s.Unread != i || s.Failures != 0 || s.Err == nil || s.Applied != v1 {
			t.Fatalf("failed read %d: %+v", i, s)
		}
	}
	b.failing.Store(false)
	if s := f.poll(t.Context()); s.Unread != 0 || s.Err != nil || s.Applied != v1 {
		t.Errorf("a read that succeeds: %+v", s)
	}
}

// A follower started with the version the node serves does not apply it
// again; once it applies another, the first one's module file is gone.
func TestFollowerStartsFromApplied(t *testing.T) {
	b := newBucket()
	dir := t.TempDir()
	v1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}}).To
	first, err := Load(t.Context(), b, shop, dir)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	f := NewFollower(FollowerConfig{Bucket: b, App: shop, Dir: dir, Applied: v1,
		Apply: func(context.Context, Loaded) error { applied++; return nil }})
	if s := f.poll(t.Context()); applied != 0 || s.Applied != v1 {
		t.Fatalf("the served version was applied again (%d) or lost: %+v", applied, s)
	}
	v2 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("2")}}).To
	if s := f.poll(t.Context()); applied != 1 || s.Applied != v2 {
		t.Fatalf("v2 not applied once: %d, %+v", applied, s)
	}
	if _, err := os.Stat(first.Classes["a"].Module); !os.IsNotExist(err) {
		t.Errorf("v1's module is still in the directory: %v", err)
	}
}

// stuck is a bucket whose reads never answer until their context ends.
type stuck struct{ bucket.Bucket }

func (stuck) Get(ctx context.Context, _ string, _ bucket.GetOptions) (*bucket.Object, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A read of current that never answers ends at the follower's timeout: the
// follower goes on polling.
func TestFollowerTimesOutAStuckRead(t *testing.T) {
	m := clock.NewManual(time.Unix(1e9, 0))
	f := NewFollower(FollowerConfig{Bucket: stuck{newBucket()}, App: shop, Dir: t.TempDir(), Clock: m,
		Apply: func(context.Context, Loaded) error { return nil }})
	done := make(chan State)
	go func() { done <- f.poll(t.Context()) }()
	if d := armed(t, m); d != time.Minute {
		t.Fatalf("the read waits %v; want the 1 min timeout", d)
	}
	m.Advance(time.Minute)
	if s := <-done; s.Err == nil {
		t.Errorf("state after a stuck read: %+v", s)
	}
}
