package deploys

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

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

// The follower applies a version once, when current changes, reads at once
// when woken, and after a failed update backs off, doubling, wake-ups
// included.
func TestFollower(t *testing.T) {
	b := newBucket()
	v1 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}}).To
	m := clock.NewManual(time.Unix(1e9, 0))
	applied := make(chan Loaded, 10)
	states := make(chan stateAt, 10)
	var fail atomic.Bool
	f := NewFollower(FollowerConfig{Bucket: b, App: shop, Dir: t.TempDir(), Clock: m,
		Apply: func(_ context.Context, l Loaded) error {
			applied <- l
			if fail.Load() {
				return errors.New("does not build")
			}
			return nil
		},
		OnState: func(s State) { states <- stateAt{s, m.Now()} },
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()

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
	armed(t, m)

	// A version that fails: the previous stays applied, and the wait
	// doubles.
	fail.Store(true)
	v3 := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("3")}}).To
	f.Wake()
	s := <-states
	<-applied
	if s.Applied != v2 || s.Err == nil || s.Failures != 1 {
		t.Fatalf("a failed update: %+v", s)
	}
	failedAt := s.at
	if d := armed(t, m); d != 6*time.Second {
		t.Errorf("backs off %v after one failure; want 6 s", d)
	}
	f.Wake() // ignored while backing off
	m.Advance(6 * time.Second)
	if s := <-states; s.Failures != 2 || !s.at.Equal(failedAt.Add(6*time.Second)) {
		t.Fatalf("the next try came at %v with %d failures; want after the 6 s backoff, with 2", s.at.Sub(failedAt), s.Failures)
	}
	<-applied
	if d := armed(t, m); d != 12*time.Second {
		t.Errorf("backs off %v after two failures; want 12 s", d)
	}
	fail.Store(false)
	m.Advance(12 * time.Second)
	if s := <-states; s.Applied != v3 || s.Err != nil || s.Failures != 0 {
		t.Fatalf("the update once it works: %+v", s)
	}
	if d := armed(t, m); d != 3*time.Second {
		t.Errorf("waits %v after a success; want the period again", d)
	}
}

// The backoff stops doubling at MaxBackoff.
func TestFollowerBackoffBound(t *testing.T) {
	b := newBucket()
	publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}})
	m := clock.NewManual(time.Unix(1e9, 0))
	states := make(chan State, 10)
	f := NewFollower(FollowerConfig{Bucket: b, App: shop, Dir: t.TempDir(), Clock: m, MaxBackoff: 10 * time.Second,
		Apply:   func(context.Context, Loaded) error { return errors.New("no") },
		OnState: func(s State) { states <- s }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i, want := range []time.Duration{6 * time.Second, 10 * time.Second, 10 * time.Second} {
		<-states
		if d := armed(t, m); d != want {
			t.Errorf("after %d failures waits %v; want %v", i+1, d, want)
		}
		m.AdvanceToNext()
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
