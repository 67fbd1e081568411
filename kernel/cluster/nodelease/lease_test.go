package nodelease

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
)

var ctx = context.Background()

// world is one bucket and one clock shared by the test's nodes.
type world struct {
	t   *testing.T
	mem *buckettest.Memory
	fb  *faulty.Bucket
	clk *simtest.Clock
}

// sim runs f in a synctest bubble with a new world.
func sim(t *testing.T, f func(*testing.T, *world)) {
	synctest.Test(t, func(t *testing.T) { f(t, newWorld(t)) })
}

// fence writes a fence over nodes/<id> as a peer would.
func (w *world) fence(id string) {
	r := w.object(id)
	f := r.Object
	f.State = Fenced
	if err := w.put(Key(id), f, bucket.Condition{IfVersion: r.Version}); err != nil {
		w.t.Fatal(err)
	}
}

// tryFence fails the test unless TryFence(id) comes out as want; msg has
// one %v for what it got.
func (w *world) tryFence(f *Fencer, id string, want FenceOutcome, msg string) {
	w.t.Helper()
	if got, _ := f.TryFence(ctx, id); got != want {
		w.t.Fatalf(msg, got)
	}
}

func newWorld(t *testing.T) *world {
	mem := buckettest.NewMemory(buckettest.Flaws{})
	return &world{t: t, mem: mem, fb: faulty.New(mem), clk: simtest.New()}
}

// node is one process's lease and what its events said.
type node struct {
	*Lease
	mu     sync.Mutex
	events []string
	// beforeLapsed, set before Start, runs in Lapsed before it is logged:
	// what happens while the lapse is being reported.
	beforeLapsed func()
}

func (n *node) log(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, s)
}

func (n *node) saw(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.events {
		if strings.HasPrefix(e, s) {
			return true
		}
	}
	return false
}

// ready is what a server that is not ready after Lapsed and ready again
// after Renewed makes of the events: no lapse, or a renewal after the last.
func (n *node) ready() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range slices.Backward(n.events) {
		switch e {
		case "lapsed":
			return false
		case "renewed":
			return true
		}
	}
	return true
}

func (w *world) lease(id, instance string, c clock.Clock) *node {
	return w.leaseOn(w.fb, id, instance, c)
}

// leaseOn is a lease on b (w's bucket, wrapped) rather than w's bucket.
func (w *world) leaseOn(b bucket.Bucket, id, instance string, c clock.Clock) *node {
	if c == nil {
		c = w.clk
	}
	n := &node{}
	l, err := New(Config{Bucket: b, Clock: c, Settings: DefaultSettings(), NodeID: id, Instance: instance,
		Info: Info{Version: "test", Advertise: "http://" + instance + ".test:8080"},
		Events: Events{
			Lapsed: func() {
				if n.beforeLapsed != nil {
					n.beforeLapsed()
				}
				n.log("lapsed")
			},
			Renewed: func() { n.log("renewed") },
			Lost:    func(err error) { n.log("lost: " + err.Error()) },
		}})
	if err != nil {
		w.t.Fatal(err)
	}
	n.Lease = l
	w.t.Cleanup(func() { w.halt(n) })
	return n
}

// await runs f while stepping the clock, for at most limit, and returns
// its error.
func (w *world) await(limit time.Duration, f func() error) error {
	return w.result(limit, goErr(f))
}

func goErr(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// result steps the clock until done sends, for at most limit.
func (w *world) result(limit time.Duration, done <-chan error) error {
	var err error
	if !w.clk.Until(limit, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	}) {
		w.t.Fatalf("not done within %v", limit)
	}
	return err
}

// start runs Start while stepping the clock.
func (w *world) start(n *node, limit time.Duration) error {
	return w.await(limit, func() error { return n.Start(ctx) })
}

// running is a lease that passed its start.
func (w *world) running(id, instance string) *node {
	n := w.lease(id, instance, nil)
	if err := w.start(n, time.Minute); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// stop runs Stop while stepping the clock.
func (w *world) stop(n *node) error {
	return w.await(time.Minute, func() error { return n.Stop(ctx) })
}

// halt ends n's writer task, so that a failed test's bubble can exit.
func (w *world) halt(n *node) {
	n.Lease.mu.Lock()
	n.Lease.stopped = true
	n.Lease.mu.Unlock()
	select {
	case <-n.quit:
	default:
		close(n.quit)
	}
	if n.Lease.lapseTimer != nil {
		n.Lease.lapseTimer.Stop()
	}
	w.fb.Drop()
	w.clk.Step(5 * time.Second)
}

func (w *world) object(id string) Read {
	r, err := ReadObject(ctx, w.mem, id)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *world) put(key string, o Object, cond bucket.Condition) error {
	b := o.Encode()
	_, err := w.mem.Put(ctx, key, bytes.NewReader(b), int64(len(b)), cond)
	return err
}

func TestSettingsValidate(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	d := DefaultSettings()
	if d.Period() != 3*time.Second || d.Validity() != 8*time.Second || d.Takeover() != 15*time.Second {
		t.Fatalf("defaults: period %v validity %v takeover %v", d.Period(), d.Validity(), d.Takeover())
	}
	for _, c := range []struct {
		name string
		edit func(*Settings)
	}{
		{"ttl", func(s *Settings) { s.TTL = 0 }},
		{"grace", func(s *Settings) { s.Grace = -time.Second }},
		{"safety", func(s *Settings) { s.Safety = 0 }},
		{"safety", func(s *Settings) { s.Safety = s.TTL }},
		{"max_skew", func(s *Settings) { s.MaxSkew = -1 }},
		{"max_skew", func(s *Settings) { s.MaxSkew = 4 * time.Second }},
		{"heartbeat_period", func(s *Settings) { s.HeartbeatPeriod = 4 * time.Second }},
		{"heartbeat_period", func(s *Settings) { s.HeartbeatPeriod = -1 }},
	} {
		s := DefaultSettings()
		c.edit(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: got %v, want an error naming %s", s, err, c.name)
		}
	}
}

func TestObjectRoundTrip(t *testing.T) {
	o := Object{State: Fenced, Instance: "abc", Seq: 7, WrittenAt: time.UnixMilli(1234567),
		Info: Info{Version: "v1", Advertise: "http://a:1", App: "acme/shop", ClusterAddr: "https://a:7443", Pins: []string{"p1", "p2"},
			Serving: Serving{Version: "9cf4de9152d8dd29", Seq: 3, Since: time.UnixMilli(1000)}.String(), Behind: "class chat: needs host function x", Secrets: true}}
	got, err := Decode(o.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.State != o.State || got.Instance != o.Instance || got.Seq != o.Seq || !got.WrittenAt.Equal(o.WrittenAt) ||
		got.Info.Advertise != o.Info.Advertise || got.Info.App != o.Info.App || got.Info.ClusterAddr != o.Info.ClusterAddr || len(got.Info.Pins) != 2 ||
		got.Info.Serving != o.Info.Serving || got.Info.Behind != o.Info.Behind || !got.Info.Secrets {
		t.Fatalf("round trip: %+v, want %+v", got, o)
	}
	o.Info.Secrets = false
	if got, err := Decode(o.Encode()); err != nil || got.Info.Secrets {
		t.Errorf("a node that does not read secrets: %+v, %v", got.Info, err)
	}
	if sv, err := ParseServing(got.Info.Serving); err != nil || sv.Version != "9cf4de9152d8dd29" || sv.Seq != 3 || !sv.Since.Equal(time.UnixMilli(1000)) {
		t.Errorf("ParseServing(%q) = %+v, %v", got.Info.Serving, sv, err)
	}
	for _, bad := range []string{"v1", "v1 x 5", "v1 1 soon", "v1 1 5 6"} {
		if _, err := ParseServing(bad); err == nil {
			t.Errorf("ParseServing(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "wasmkeep-node 2\nx\n1\n", "wasmkeep-node 3\nlive - 1\n5\n", "wasmkeep-node 3\nzombie a 1\n5\n", "wasmkeep-node 3\nlive a 1\nsoon\n"} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

// SetServing reaches the next lease write, Behind made one short line.
func TestSetServing(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		a.SetServing("v2 4 1000", "class chat:\nneeds \x01"+strings.Repeat("é", 400))
		w.clk.Step(5 * time.Second)
		inf := w.object("a").Object.Info
		if inf.Serving != "v2 4 1000" || strings.ContainsAny(inf.Behind, "\n\x01") || !strings.HasPrefix(inf.Behind, "class chat: needs") ||
			len(inf.Behind) > 300 || !utf8.ValidString(inf.Behind) {
			t.Errorf("after SetServing: serving %q, behind %q", inf.Serving, inf.Behind)
		}
		a.SetServing("v2 4 1000", "")
		w.clk.Step(5 * time.Second)
		if inf := w.object("a").Object.Info; inf.Behind != "" {
			t.Errorf("behind %q after it was cleared", inf.Behind)
		}
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
	})
}

// The start check waits ttl + grace even with no object, then creates it;
// the lease is valid from then on, renewed on its own task.
func TestStartCheckWaitsThenCreates(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		if got := w.clk.Since(); got < 15*time.Second {
			t.Fatalf("Start returned after %v, before ttl + grace", got)
		}
		if !a.Valid() {
			t.Fatal("not valid after Start")
		}
		r := w.object("a")
		if !r.live() || r.Object.Instance != "i1" {
			t.Fatalf("nodes/a: %+v", r)
		}
		w.clk.Step(30 * time.Second)
		if !a.Valid() || a.saw("lapsed") || a.saw("lost") {
			t.Fatalf("after 30 s: valid %v, events %v", a.Valid(), a.events)
		}
		if r2 := w.object("a"); r2.Object.Seq < 10 {
			t.Fatalf("seq %d after 30 s: the writer did not write every period", r2.Object.Seq)
		}
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
	})
}

// A second process with the same id is refused, naming the first's
// address, and writes nothing.
func TestStartCheckRefusesTwin(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		b := w.lease("a", "i2", nil)
		err := w.start(b, time.Minute)
		var twin *TwinError
		if !errors.As(err, &twin) || twin.Advertise != "http://i1.test:8080" {
			t.Fatalf("second process: %v, want a TwinError naming http://i1.test:8080", err)
		}
		if r := w.object("a"); r.Object.Instance != "i1" || !a.Valid() || a.saw("lost") {
			t.Fatalf("the first process was disturbed: %+v, events %v", r.Object, a.events)
		}
		w.stop(a)
	})
}

// After a clean stop, a new process waits only until the released
// object's written_at is ttl + grace old, then replaces it.
func TestStartCheckAfterRelease(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.clk.Step(time.Second)
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
		if a.Valid() {
			t.Fatal("valid after Stop")
		}
		r := w.object("a")
		if r.Object.State != Released || r.Object.Instance != "i1" {
			t.Fatalf("after Stop: %+v", r.Object)
		}
		w.clk.Step(20 * time.Second) // the released written_at is past ttl + grace
		b := w.lease("a", "i2", nil)
		t0 := w.clk.Now()
		if err := w.start(b, time.Minute); err != nil {
			t.Fatal(err)
		}
		if d := w.clk.Now().Sub(t0); d > 3*time.Second {
			t.Fatalf("start check after a release took %v, want about half a period", d)
		}
		if r := w.object("a"); !r.live() || r.Object.Instance != "i2" {
			t.Fatalf("nodes/a: %+v", r.Object)
		}
		w.stop(b)
	})
}

// Two processes that pass the check together: only one first write lands
// (each is conditioned on what its check read), the other goes back to
// the check and is refused there.
func TestSimultaneousStartsOneWins(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a, b := w.lease("a", "i1", nil), w.lease("a", "i2", nil)
		errs := make(chan error, 2)
		go func() { errs <- a.Start(ctx) }()
		go func() { errs <- b.Start(ctx) }()
		var got []error
		w.clk.Until(time.Minute, func() bool {
			select {
			case err := <-errs:
				got = append(got, err)
			default:
			}
			return len(got) == 2
		})
		var twin *TwinError
		if len(got) != 2 || (got[0] == nil) == (got[1] == nil) || !errors.As(errors.Join(got...), &twin) {
			t.Fatalf("starts: %v, want one nil and one TwinError", got)
		}
		for _, n := range []*node{a, b} {
			if n.Valid() {
				w.stop(n)
			}
		}
	})
}

// A node whose lease a peer fenced finds out at its next write and loses
// the lease; its write must not land over the fence. Planted bug: renew
// writing without its If-Match (bucket.Condition{}) lands over the fence,
// the node never reports Lost and this test fails.
func TestFencedNodeLosesItsLease(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.fence("a")
		w.clk.Step(4 * time.Second)
		if !a.saw("lost: node lease lost: this node was fenced") || a.Valid() {
			t.Fatalf("events %v, valid %v: the fence was not noticed", a.events, a.Valid())
		}
		if r := w.object("a"); r.Object.State != Fenced {
			t.Fatalf("nodes/a is %s: a write landed over the fence", r.Object.State)
		}
		w.clk.Step(10 * time.Second)
		if r := w.object("a"); r.Object.State != Fenced {
			t.Fatal("the lost lease kept writing")
		}
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
	})
}

// A write whose reply was lost landed; the next write's condition fails,
// and the re-read finds this process's own live object: adopted, not taken
// for a fence.
func TestLostReplyAdopted(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.fb.Next(faulty.Put, "nodes/a", faulty.LostReply)
		seq := w.object("a").Object.Seq
		w.clk.Step(7 * time.Second)
		if w.fb.Counts[faulty.LostReply] != 1 || w.object("a").Object.Seq < seq+2 {
			t.Fatalf("the lost reply did not happen or writing stopped: %v", w.fb.Counts)
		}
		if a.saw("lost") || a.saw("lapsed") || !a.Valid() {
			t.Fatalf("events %v, valid %v", a.events, a.Valid())
		}
		w.stop(a)
	})
}

// A lost reply followed by a fence: the re-read shows a fenced object that
// still names this instance, which is not this process's write. Planted
// bug: ours() accepting any state with this instance adopts the fence, the
// node keeps acting and this test fails.
func TestFenceNotAdopted(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.fb.Next(faulty.Put, "nodes/a", faulty.LostReply)
		w.clk.Step(3 * time.Second) // the write lands, its reply is lost
		w.fence("a")
		w.clk.Step(4 * time.Second)
		if !a.saw("lost") || a.Valid() {
			t.Fatalf("events %v, valid %v: a fence was adopted", a.events, a.Valid())
		}
		w.stop(a)
	})
}

// The bucket stops answering: the lease lapses at written_at + ttl -
// safety while a write hangs, is not lost, keeps writing, and is valid
// again at the first acknowledged write, from which a watch of peers
// starts again.
func TestLapseAndRenew(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.clk.Step(time.Second)
		last := w.object("a").Object.WrittenAt
		for range 20 {
			w.fb.Next(faulty.Put, "nodes/a", faulty.Hang)
		}
		w.clk.Until(20*time.Second, func() bool { return a.saw("lapsed") })
		if !a.saw("lapsed") || a.Valid() {
			t.Fatalf("no lapse: events %v", a.events)
		}
		if d := w.clk.Now().Sub(last); d < 8*time.Second || d > 8*time.Second+simtest.Tick {
			t.Fatalf("lapsed %v after the last acknowledged send, want ttl - safety (8 s)", d)
		}
		w.clk.Until(time.Minute, func() bool { return a.saw("renewed") })
		if !a.Valid() || a.saw("lost") {
			t.Fatalf("after the outage: valid %v, events %v", a.Valid(), a.events)
		}
		if !a.WatchFrom().After(last.Add(8 * time.Second)) {
			t.Fatalf("watch from %v: not restarted by the renewal", a.WatchFrom())
		}
		w.stop(a)
	})
}

// A first write held in flight until it times out lands later; the start
// check, run again, finds this process's own live object and adopts it.
// Planted bug: check() not adopting its own instance (taking it for a
// twin) fails this test.
func TestLateFirstWriteAdopted(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.lease("a", "i1", nil)
		w.fb.Next(faulty.Put, "nodes/a", faulty.Hold)
		done := goErr(func() error { return a.Start(ctx) })
		w.clk.Until(time.Minute, func() bool { return w.fb.Held() == 1 })
		w.clk.Step(5 * time.Second) // timed out, back in the check
		if w.fb.Land() != 1 {
			t.Fatal("the held first write did not land")
		}
		err := w.result(time.Minute, done)
		if err != nil || !a.Valid() {
			t.Fatalf("Start: %v, valid %v", err, a.Valid())
		}
		w.clk.Step(10 * time.Second)
		if a.saw("lost") || !a.Valid() {
			t.Fatalf("events %v", a.events)
		}
		w.stop(a)
	})
}

// A lost reply on the released write: the retry's conflict re-reads a
// released object, and the stop is done.
func TestStopReleasedReplyLost(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		w.clk.Step(time.Second)
		kept := w.object("a").Object.WrittenAt
		w.fb.Next(faulty.Put, "nodes/a", faulty.LostReply)
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
		if r := w.object("a"); r.Object.State != Released || !r.Object.WrittenAt.Equal(kept) {
			t.Fatalf("after Stop: %+v, want released keeping %v", r.Object, kept)
		}
	})
}

// The previous process is fenced while the start check runs: a fence is
// not a process running, and the check ends once the fence's kept
// written_at is ttl + grace old, before its full wait. Planted bug: check()
// refusing any change as a twin (not only a live one) fails this test.
func TestStartCheckFenceIsNotATwin(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		old := w.running("a", "i1")
		w.halt(old) // it dies: no more writes
		b := w.lease("a", "i2", nil)
		done := goErr(func() error { return b.Start(ctx) })
		w.clk.Step(3 * time.Second)
		w.fence("a") // a peer fences the dead process
		start := w.clk.Now()
		if err := w.result(time.Minute, done); err != nil {
			t.Fatalf("start after a fence: %v", err)
		}
		if d := w.clk.Now().Sub(start); d > 12*time.Second {
			t.Fatalf("the check went on %v after the fence, its full wait", d)
		}
		if r := w.object("a"); !r.live() || r.Object.Instance != "i2" {
			t.Fatalf("nodes/a: %+v", r.Object)
		}
		w.stop(b)
	})
}

// While the bucket cannot be read, the start check keeps trying and does
// not pass.
func TestStartCheckNeedsReads(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		for range 100 {
			w.fb.Next(faulty.Get, "nodes/a", faulty.Fail)
		}
		a := w.lease("a", "i1", nil)
		done := goErr(func() error { return a.Start(ctx) })
		w.clk.Step(30 * time.Second)
		if len(done) != 0 || a.Valid() {
			t.Fatal("the start check passed without reading nodes/a")
		}
		w.fb.Clear()
		if err := w.result(time.Minute, done); err != nil {
			t.Fatal(err)
		}
		w.stop(a)
	})
}

// A running node whose object is deleted loses its lease at its next
// write (If-Match on a missing key fails), and recreates nothing.
func TestDeletedObjectLosesLease(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		if err := w.mem.Delete(ctx, Key("a"), bucket.Condition{}); err != nil {
			t.Fatal(err)
		}
		w.clk.Step(4 * time.Second)
		if !a.saw("lost: node lease lost: nodes/a was deleted") || a.Valid() {
			t.Fatalf("events %v", a.events)
		}
		if r := w.object("a"); r.Found {
			t.Fatal("the lost lease wrote nodes/a again")
		}
		w.stop(a)
	})
}

// gated holds every Put of one key, once closed, until it is opened (or
// the Put's context ends): a write in flight whose reply comes when the
// test says.
type gated struct {
	bucket.Bucket
	key  string
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *gated) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gated) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = nil
}

func (g *gated) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil && key == g.key {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Bucket.Put(ctx, key, body, size, cond)
}

// A write sent before the lapse is acknowledged while the lapse is being
// reported (here inside Lapsed; in a server, the lapse timer's goroutine
// descheduled between its decision and its call). Renewed must come after
// Lapsed, so that a server not ready after Lapsed and ready again after
// Renewed ends ready while its lease is valid; and the lease must not be
// valid again before Lapsed returned (the holds it drops are still held).
// Before events were delivered in order, Renewed ran on the writer's
// goroutine meanwhile and Lapsed after it: the node stayed not ready for
// good, its lease valid.
func TestRenewedNeverOvertakesLapsed(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		g := &gated{Bucket: w.fb, key: Key("a")}
		a := w.leaseOn(g, "a", "i1", nil)
		validWhileLapsing := false
		a.beforeLapsed = func() {
			a.beforeLapsed = nil
			g.open()        // the write in flight is acknowledged
			synctest.Wait() // and the writer has taken it
			validWhileLapsing = a.Valid()
		}
		if err := w.start(a, time.Minute); err != nil {
			t.Fatal(err)
		}
		g.close()
		if !w.clk.Until(20*time.Second, func() bool { return a.saw("lapsed") }) {
			t.Fatal("no lapse while every write was held")
		}
		if validWhileLapsing {
			t.Error("the lease was valid again before Lapsed returned")
		}
		w.clk.Step(time.Second)
		if !a.Valid() || !a.ready() {
			t.Fatalf("after the renewal: valid %v, ready %v (events %v)", a.Valid(), a.ready(), a.events)
		}
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
	})
}

// steppedClock is w.clk as a server's clock reads: each reading carries
// a monotonic reading (from a time.Now taken outside the bubble: inside,
// time.Now has none), and its wall reading can be stepped apart from it,
// as an operator or NTP steps a machine's clock.
type steppedClock struct {
	*simtest.Clock
	base time.Time    // at simtest.Epoch
	step atomic.Int64 // the wall reading's step, in ns
}

func newSteppedClock(t *testing.T, c *simtest.Clock, base time.Time) *steppedClock {
	s := &steppedClock{Clock: c, base: base}
	// A check that withWall does what it says on this Go's time.Time.
	moved := withWall(s.base, -time.Minute)
	if moved.Sub(s.base) != 0 || moved.Round(0).Sub(s.base.Round(0)) != -time.Minute {
		t.Fatalf("withWall does not step the wall reading alone (%v from %v): time.Time's layout changed", moved, s.base)
	}
	return s
}

func (s *steppedClock) Now() time.Time {
	return withWall(s.base.Add(s.Clock.Now().Sub(simtest.Epoch)), time.Duration(s.step.Load()))
}

// sentAt is how long after simtest.Epoch a written_at this clock wrote
// was read (to the millisecond).
func (s *steppedClock) sentAt(writtenAt time.Time) time.Duration {
	return writtenAt.Sub(s.base.Round(0).Add(time.Duration(s.step.Load())))
}

// withWall is t with its wall reading moved by d (whole seconds) and its
// monotonic reading kept, which no function of package time does: a
// time.Time is {wall uint64, ext int64, loc}, and with a monotonic reading
// wall holds the seconds since 1885 from bit 30 and ext the monotonic
// reading.
func withWall(t time.Time, d time.Duration) time.Time {
	p := (*struct {
		wall uint64
		ext  int64
		loc  *time.Location
	})(unsafe.Pointer(&t))
	p.wall += uint64(int64(d/time.Second)) << 30
	return t
}

// The machine's wall clock is stepped back a minute: the node's own
// validity, and its lapse timer, count on the monotonic clock from each
// write's send, as peers' reckoning from its written_at does, rather than
// a minute longer. So too for a write adopted after its reply was lost:
// its validity counts from its own send, as recorded then, not from the
// written_at read back (a wall reading) nor from the later write whose
// conflict found it. Before, validity was written_at (the wall reading,
// truncated, with no monotonic reading) + ttl - safety: the lease stayed
// valid a minute past what peers assume.
func TestWallClockStepDoesNotExtendValidity(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lostReply bool
	}{{"acknowledged", false}, {"adopted", true}} {
		base := time.Now()
		t.Run(tc.name, func(t *testing.T) {
			sim(t, func(t *testing.T, w *world) {
				c := newSteppedClock(t, w.clk, base)
				a := w.lease("a", "i1", c)
				if err := w.start(a, time.Minute); err != nil {
					t.Fatal(err)
				}
				if tc.lostReply {
					w.fb.Next(faulty.Put, "nodes/a", faulty.LostReply)
				}
				w.clk.Step(3500 * time.Millisecond) // one write, sent at 3 s
				if tc.lostReply && w.fb.Counts[faulty.LostReply] != 1 {
					t.Fatal("no reply was lost")
				}
				sent := c.sentAt(w.object("a").Object.WrittenAt)
				c.step.Store(int64(-time.Minute))
				if tc.lostReply {
					w.clk.Step(time.Second) // the next write's conflict finds it: adopted
				}
				for range 20 {
					w.fb.Next(faulty.Put, "nodes/a", faulty.Hang)
				}
				if !w.clk.Until(20*time.Second, func() bool { return a.saw("lapsed") }) || a.Valid() {
					t.Fatal("no lapse within 20 s of the last write after the wall clock went back a minute")
				}
				if d := w.clk.Since() - sent; d < 8*time.Second || d > 8*time.Second+simtest.Tick {
					t.Fatalf("lapsed %v after the last write's send, want ttl - safety (8 s)", d)
				}
				w.stop(a)
			})
		})
	}
}

// TestTakingLine: line 12 is written only while the node takes no actor,
// so a serving node's lease keeps its bytes (ten lines, or eleven with
// secrets), and each state reads back with or without line 11.
func TestTakingLine(t *testing.T) {
	o := Object{State: Live, Instance: "abc", Seq: 7, WrittenAt: time.UnixMilli(1234567), Info: Info{Version: "v1", App: "acme/shop"}}
	const serving = "wasmkeep-node 3\nlive abc 7\n1234567\nv1\n\nacme/shop\n\n\n\n\n"
	if got := string(o.Encode()); got != serving {
		t.Fatalf("a serving node's lease:\n%q, want the bytes it had before line 12:\n%q", got, serving)
	}
	o.Info.Secrets = true
	if got := string(o.Encode()); got != serving+"secrets\n" {
		t.Fatalf("a serving node that reads secrets:\n%q", got)
	}
	for _, secrets := range []bool{false, true} {
		for _, st := range []Taking{Takes, Draining, Drained, Stuck} {
			o.Info.Secrets, o.Info.Taking = secrets, st
			got, err := Decode(o.Encode())
			if err != nil || got.Info.Taking != st || got.Info.Secrets != secrets {
				t.Errorf("secrets %v, taking %q: read back %+v, %v", secrets, st, got.Info, err)
			}
		}
	}
	o.Info.Secrets, o.Info.Taking = false, Drained
	if got := string(o.Encode()); got != serving+"\ndrained\n" {
		t.Errorf("a drained node's lease: %q", got)
	}
	o.Info.NotTaking = []string{ReasonDrain, ReasonSecrets}
	if got := string(o.Encode()); got != serving+"\ndrained drain secrets\n" {
		t.Errorf("a drained node's lease with its reasons: %q", got)
	}
	if got, err := Decode(o.Encode()); err != nil || got.Info.Taking != Drained || !slices.Equal(got.Info.NotTaking, o.Info.NotTaking) {
		t.Errorf("reasons read back as %+v, %v", got.Info, err)
	}
	o.Info.Taking = Takes // reasons are said only while it takes none
	if got := string(o.Encode()); got != serving {
		t.Errorf("a serving node's lease with reasons left over: %q", got)
	}
	if got, err := Decode([]byte(serving + "\nserving\n")); err != nil || got.Info.Taking != Takes {
		t.Errorf("line 12 \"serving\" read as %q, %v; want Takes", got.Info.Taking, err)
	}
	if Takes.String() != "serving" || Stuck.String() != "stuck" {
		t.Errorf("states shown as %q, %q", Takes, Stuck)
	}
}

// TestCapabilitiesLine: line 13 follows empty lines 11 and 12 when only it
// says something, reads back with every taking state, and a reader keeps
// words it does not know (it only asks for those it does).
func TestCapabilitiesLine(t *testing.T) {
	o := Object{State: Live, Instance: "abc", Seq: 7, WrittenAt: time.UnixMilli(1234567), Info: Info{Version: "v1", App: "acme/shop", Capabilities: []string{"take"}}}
	const serving = "wasmkeep-node 3\nlive abc 7\n1234567\nv1\n\nacme/shop\n\n\n\n\n"
	if got := string(o.Encode()); got != serving+"\n\ntake\n" {
		t.Fatalf("a serving node that takes calls: %q", got)
	}
	for _, st := range []Taking{Takes, Draining, Stuck} {
		o.Info.Taking = st
		got, err := Decode(o.Encode())
		if err != nil || got.Info.Taking != st || !got.Info.HasCapability("take") || got.Info.HasCapability("room") {
			t.Errorf("taking %q: read back %+v, %v", st, got.Info, err)
		}
	}
	if got, err := Decode([]byte(serving + "secrets\n\nfly take \x01\n")); err != nil || !got.Info.Secrets || !slices.Equal(got.Info.Capabilities, []string{"fly", "take"}) {
		t.Errorf("line 13 with an unknown word: %+v, %v", got.Info, err)
	}
	if got, err := Decode([]byte(serving)); err != nil || len(got.Info.Capabilities) != 0 {
		t.Errorf("no line 13: %+v, %v", got.Info, err)
	}
}

// TestRoomLine: line 14 follows empty lines 11 to 13 when only it says
// something, is absent at 0 (a full node's lease keeps its bytes), and
// what is not a positive number reads as no room.
func TestRoomLine(t *testing.T) {
	o := Object{State: Live, Instance: "abc", Seq: 7, WrittenAt: time.UnixMilli(1234567), Info: Info{Version: "v1", App: "acme/shop", Room: 12}}
	const serving = "wasmkeep-node 3\nlive abc 7\n1234567\nv1\n\nacme/shop\n\n\n\n\n"
	if got := string(o.Encode()); got != serving+"\n\n\n12\n" {
		t.Fatalf("a node with room: %q", got)
	}
	o.Info.Taking, o.Info.Capabilities = Draining, []string{"take"}
	if got, err := Decode(o.Encode()); err != nil || got.Info.Room != 12 || got.Info.Taking != Draining || !got.Info.HasCapability("take") {
		t.Errorf("room with lines 12 and 13: read back %+v, %v", got.Info, err)
	}
	o.Info = Info{Version: "v1", App: "acme/shop"}
	if got := string(o.Encode()); got != serving {
		t.Errorf("a node with no room: %q, want the bytes it had before line 14", got)
	}
	for _, line := range []string{"", "0", "-3", "many", "7 slots"} {
		if got, err := Decode([]byte(serving + "\n\n\n" + line + "\n")); err != nil || got.Info.Room != 0 {
			t.Errorf("line 14 %q read as room %d, %v; want 0", line, got.Info.Room, err)
		}
	}
}

// SetRoom's figure is read for each write as it is sent.
func TestSetRoom(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		var room atomic.Int64
		room.Store(5)
		a.SetRoom(func() int { return int(room.Load()) })
		w.clk.Step(5 * time.Second)
		if got := w.object("a").Object.Info.Room; got != 5 {
			t.Errorf("room %d, want 5", got)
		}
		room.Store(0)
		w.clk.Step(5 * time.Second)
		if got := w.object("a").Object.Info.Room; got != 0 {
			t.Errorf("room %d after it went to 0", got)
		}
		if err := w.stop(a); err != nil {
			t.Fatal(err)
		}
	})
}
