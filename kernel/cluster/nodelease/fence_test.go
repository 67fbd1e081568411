package nodelease

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
)

// deadPeer writes a live nodes/<id> for a process that then writes no
// more, its written_at age before now.
func (w *world) deadPeer(id string, age time.Duration) []byte {
	o := Object{State: Live, Instance: "dead1", Seq: 5, WrittenAt: truncMS(w.clk.Now().Add(-age)), Info: Info{Advertise: "http://dead"}}
	if err := w.put(Key(id), o, bucket.Condition{}); err != nil {
		w.t.Fatal(err)
	}
	return o.Encode()
}

// A peer whose last write is long past ttl + grace is still fenced only
// after a full watch (a lease period plus an attempt timeout) of its
// object unchanged; the fence keeps its instance and written_at. Planted
// bug: Fencer.due ignoring the watch (true once the lease is valid)
// fences at once and this test fails.
func TestFenceOnlyAfterFullWatch(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		b := w.running("b", "i1")
		f := b.Fencer()
		body := w.deadPeer("a", time.Minute)
		f.Observe("a", body)
		w.clk.Step(5 * time.Second)
		f.Observe("a", body)
		if got, err := f.TryFence(ctx, "a"); got != NotDue || err != nil {
			t.Fatalf("after 5 s of watch: %v %v, want not due", got, err)
		}
		if w.object("a").Object.State != Live {
			t.Fatal("fenced before the full watch")
		}
		w.clk.Step(time.Second) // 6 s > 3 s + 2.67 s
		if got, err := f.TryFence(ctx, "a"); got != FenceWritten || err != nil {
			t.Fatalf("after the watch: %v %v, want fenced", got, err)
		}
		r := w.object("a")
		want, _ := Decode(body)
		if r.Object.State != Fenced || r.Object.Instance != "dead1" || !r.Object.WrittenAt.Equal(want.WrittenAt) {
			t.Fatalf("fence %+v does not keep the peer's instance and written_at", r.Object)
		}
		w.stop(b)
	})
}

// A peer that died just now is watched, then waited for until its
// written_at + ttl + grace has passed on this clock.
func TestFenceWaitsForTakeoverBound(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		b := w.running("b", "i1")
		f := b.Fencer()
		f.Observe("a", w.deadPeer("a", 0))
		w.clk.Step(7 * time.Second)
		w.tryFence(f, "a", NotYet, "7 s after the peer's last write: %v, want not yet")
		w.clk.Step(8 * time.Second)
		w.tryFence(f, "a", FenceWritten, "15 s after: %v, want fenced")
		w.stop(b)
	})
}

// A peer that wrote since it was watched is alive: the watch starts again.
func TestFenceWatchRestartsWhenPeerWrites(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		b := w.running("b", "i1")
		f := b.Fencer()
		f.Observe("a", w.deadPeer("a", time.Minute))
		w.clk.Step(6 * time.Second)
		w.deadPeer("a", 30*time.Second) // it wrote again (an older date: skew)
		w.tryFence(f, "a", Alive, "%v, want alive")
		if f.Due("a") || w.object("a").Object.State != Live {
			t.Fatal("the watch did not start again")
		}
		w.clk.Step(6 * time.Second)
		w.tryFence(f, "a", FenceWritten, "%v, want fenced after a new full watch")
		w.stop(b)
	})
}

// After a lapse of its own, a node judges no peer before a full watch
// counted from its first acknowledged write after the lapse. Planted bug:
// Fencer.due counting from the peer's first sighting only (ignoring
// WatchFrom) fences right after the renewal and this test fails.
func TestNoFenceRightAfterOwnLapse(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		b := w.running("b", "i1")
		f := b.Fencer()
		body := w.deadPeer("a", time.Minute)
		f.Observe("a", body)
		for range 6 {
			w.fb.Next(faulty.Put, "nodes/b", faulty.Fail)
		}
		w.clk.Until(time.Minute, func() bool { return b.saw("lapsed") })
		w.clk.Until(time.Minute, func() bool { return b.saw("renewed") })
		renewed := w.clk.Now()
		f.Observe("a", body)
		w.clk.Step(2 * time.Second)
		w.tryFence(f, "a", NotDue, "2 s after its own renewal: %v, want not due")
		w.clk.Until(10*time.Second, func() bool { return f.Due("a") })
		if d := w.clk.Now().Sub(renewed); d < b.Settings().Watch() {
			t.Fatalf("due %v after the renewal, before a full watch", d)
		}
		w.tryFence(f, "a", FenceWritten, "%v, want fenced")
		w.stop(b)
	})
}

// A fence decided on a read that is stale by the time it is written is
// refused by its condition, and the peer counts as alive.
func TestFenceOnStaleReadRefused(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		b := w.running("b", "i1")
		f := b.Fencer()
		f.Observe("a", w.deadPeer("a", time.Minute))
		w.clk.Step(6 * time.Second)
		// The fence's Put is held; meanwhile the peer writes; then the fence
		// lands, its condition judged then.
		w.fb.Next(faulty.Put, "nodes/a", faulty.Hold)
		done := make(chan FenceOutcome, 1)
		go func() { got, _ := f.TryFence(ctx, "a"); done <- got }()
		w.clk.Until(time.Second, func() bool { return w.fb.Held() == 1 })
		w.deadPeer("a", 0)
		w.fb.Land()
		w.clk.Step(3 * time.Second)
		if got := <-done; got == FenceWritten {
			t.Fatal("reported fenced")
		}
		if r := w.object("a"); r.Object.State != Live {
			t.Fatalf("a stale fence landed: %+v", r.Object)
		}
		w.stop(b)
	})
}
