package ownership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

var ctx = context.Background()

// fakeLease is a node lease a test sets valid or not.
type fakeLease struct {
	mu       sync.Mutex
	valid    bool
	id, inst string
}

func (l *fakeLease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}
func (l *fakeLease) set(v bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.valid = v
}
func (l *fakeLease) Instance() string { return l.inst }
func (l *fakeLease) NodeID() string   { return l.id }

type world struct {
	t   *testing.T
	mem *buckettest.Memory
	fb  *faulty.Bucket
	clk *simtest.Clock
}

func newWorld(t *testing.T) *world {
	mem := buckettest.NewMemory(buckettest.Flaws{})
	return &world{t: t, mem: mem, fb: faulty.New(mem), clk: simtest.New()}
}

// node is a live node: its lease object written live, its Owners.
func (w *world) node(id, inst string) (*Owners, *fakeLease) {
	l := &fakeLease{valid: true, id: id, inst: inst}
	w.nodeObject(id, nodelease.Live, inst, w.clk.Now())
	o, err := New(Config{Bucket: w.fb, Clock: w.clk, Lease: l, Settings: nodelease.DefaultSettings()})
	if err != nil {
		w.t.Fatal(err)
	}
	return o, l
}

func (w *world) nodeObject(id string, st nodelease.State, inst string, at time.Time) {
	b := nodelease.Object{State: st, Instance: inst, Seq: 1, WrittenAt: at}.Encode()
	if _, err := w.mem.Put(ctx, nodelease.Key(id), bytes.NewReader(b), int64(len(b)), bucket.Condition{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) record(a Actor) (Record, bool) {
	o, err := w.mem.Get(ctx, a.Key(), bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return Record{}, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	defer o.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(o.Body)
	r, err := Decode(buf.Bytes())
	if err != nil {
		w.t.Fatal(err)
	}
	return r, true
}

func (w *world) acquire(o *Owners, a Actor) Hold {
	w.t.Helper()
	h, err := o.Acquire(ctx, a)
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

// acquireAt acquires and checks the hold's generation.
func (w *world) acquireAt(o *Owners, a Actor, gen uint64) Hold {
	w.t.Helper()
	h := w.acquire(o, a)
	if h.Generation != gen {
		w.t.Fatalf("%s acquired at generation %d, want %d", a, h.Generation, gen)
	}
	return h
}

// resolvedKeeping runs a pass and checks that it left rec and o's hold.
func (w *world) resolvedKeeping(o *Owners, a Actor, rec Record) {
	w.t.Helper()
	o.Resolve(ctx)
	w.want(a, rec)
	if _, owns := o.Owns(a); !owns || o.Pending() != 0 {
		w.t.Fatalf("owns %v, pending %d", owns, o.Pending())
	}
}

// releaseFails releases h with fault k on its write: it must be pending.
func (w *world) releaseFails(o *Owners, h Hold, k faulty.Kind) {
	w.t.Helper()
	w.fb.Next(faulty.Put, "owners/", k)
	if err := o.Release(ctx, h); !errors.Is(err, ErrReleasePending) {
		w.t.Fatalf("release: %v", err)
	}
}

func (w *world) want(a Actor, want Record) {
	w.t.Helper()
	if got, ok := w.record(a); !ok || got != want {
		w.t.Fatalf("record %s: %+v (found %v), want %+v", a, got, ok, want)
	}
}

var act = Actor{"t", "c", "n"}

func TestRecordRoundTrip(t *testing.T) {
	moved := Record{Generation: 4, Next: Successor{Node: "b", Instance: "ib", Until: time.UnixMilli(1_700_000_000_123)}}
	for _, r := range []Record{{Node: "a", Instance: "i", Generation: 7}, {Generation: 3}, moved} {
		if got, err := Decode(r.Encode()); err != nil || got != r {
			t.Fatalf("%+v: %+v %v", r, got, err)
		}
	}
	if got := string(moved.Encode()); got != "wasmkeep-owner 1\n- - 4\nnext b ib 1700000000123\n" {
		t.Errorf("a record released to a successor: %q", got)
	}
	for _, bad := range []string{"", "wasmkeep-owner 1\na - 1\n", "wasmkeep-owner 2\na i 1\n", "wasmkeep-owner 1\na i x\n",
		"wasmkeep-owner 1\na i 1\nnext b ib 1\n", "wasmkeep-owner 1\n- - 1\nnext b ib\n", "wasmkeep-owner 1\n- - 1\nnext - - 1\n",
		"wasmkeep-owner 1\n- - 1\nnext b ib x\n", "wasmkeep-owner 1\n- - 1\nnext b ib 1\nmore\n"} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

// Every hold has a generation of its own: a release keeps it, the next
// acquisition, here or on another node, writes one above. Planted bug:
// Acquire writing cur.Generation instead of cur.Generation+1 reuses a
// generation and this test fails.
func TestGenerationPerHold(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	b, _ := w.node("b", "ib")
	h := w.acquire(a, act)
	w.want(act, Record{Node: "a", Instance: "ia", Generation: 1})
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	w.want(act, Record{Generation: 1})
	h = w.acquire(a, act)
	if h.Generation != 2 {
		t.Fatalf("second hold at generation %d, want 2", h.Generation)
	}
	if again := w.acquire(a, act); again != h {
		t.Fatal("acquiring a held actor made a new hold")
	}
	a.Release(ctx, h)
	if h = w.acquire(b, act); h.Generation != 3 {
		t.Fatalf("another node's hold at generation %d, want 3", h.Generation)
	}
	w.want(act, Record{Node: "b", Instance: "ib", Generation: 3})
}

// A move's release names its successor (ADR 1070) and decides nothing:
// any node may acquire the record, at the next generation, and a parked
// record is released to one the same way; ClearSuccessor takes it out of
// a record naming nobody, and leaves any other.
func TestReleaseToSuccessor(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	c, _ := w.node("c", "ic")
	next := Successor{Node: "b", Instance: "ib", Until: time.UnixMilli(w.clk.Now().Add(10 * time.Second).UnixMilli())}
	if err := a.ReleaseTo(ctx, w.acquire(a, act), next); err != nil {
		t.Fatal(err)
	}
	w.want(act, Record{Generation: 1, Next: next})
	w.acquireAt(c, act, 2)
	w.want(act, Record{Node: "c", Instance: "ic", Generation: 2})
	if !c.Park(w.acquire(c, act)) {
		t.Fatal("not parked")
	}
	if ok, err := c.ReleaseParkedTo(ctx, act, next); !ok || err != nil {
		t.Fatalf("the parked record's release: %v %v", ok, err)
	}
	w.want(act, Record{Generation: 2, Next: next})
	// A failed take's clearing: only a record naming nobody and that very
	// successor is rewritten (another move's, to the same node, stays);
	// one naming a holder stays. (Its If-Match: the simulation's planted
	// bug 8.)
	later := next
	later.Until = later.Until.Add(time.Second)
	for _, other := range []Successor{{Node: "z", Instance: "iz", Until: next.Until}, later} {
		if err := c.ClearSuccessor(ctx, act, other); err != nil {
			t.Fatal(err)
		}
		w.want(act, Record{Generation: 2, Next: next})
	}
	if err := c.ClearSuccessor(ctx, act, next); err != nil {
		t.Fatal(err)
	}
	w.want(act, Record{Generation: 2})
	w.acquireAt(a, act, 3)
	if err := c.ClearSuccessor(ctx, act, next); err != nil {
		t.Fatal(err)
	}
	w.want(act, Record{Node: "a", Instance: "ia", Generation: 3})
}

// A record naming a live holder is not taken; one whose node lease was
// fenced is free once its written_at + ttl + grace has passed; a live
// object of another instance frees at once; an absent one never.
func TestHolderFreedOnlyByItsNodeLease(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	b, _ := w.node("b", "ib")
	w.acquire(b, act)
	var held *HeldError
	if _, err := a.Acquire(ctx, act); !errors.As(err, &held) || held.Record.Node != "b" {
		t.Fatalf("acquire of a live node's actor: %v", err)
	}
	w.mem.Delete(ctx, nodelease.Key("b"), bucket.Condition{})
	if _, err := a.Acquire(ctx, act); !errors.As(err, &held) {
		t.Fatalf("with nodes/b absent: %v, want held", err)
	}
	w.nodeObject("b", nodelease.Fenced, "ib", w.clk.Now().Add(-14*time.Second))
	if _, err := a.Acquire(ctx, act); !errors.As(err, &held) {
		t.Fatalf("fenced 14 s ago: %v, want held", err)
	}
	w.nodeObject("b", nodelease.Fenced, "ib", w.clk.Now().Add(-15*time.Second))
	w.acquireAt(a, act, 2)
	other := Actor{"t", "c", "m"}
	w.nodeObject("b", nodelease.Live, "ib", w.clk.Now())
	w.acquire(b, other)
	w.nodeObject("b", nodelease.Live, "ib2", w.clk.Now()) // a new process of b
	w.acquireAt(a, other, 2)
}

// A release whose reply was lost is pending; the background pass ends it
// when the read shows the record no longer names this hold.
func TestReleaseLostReplyResolved(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	h := w.acquire(a, act)
	w.releaseFails(a, h, faulty.LostReply)
	if _, owns := a.Owns(act); owns || a.Pending() != 1 {
		t.Fatal("still owner, or nothing pending")
	}
	if a.Resolve(ctx) != 1 || a.Pending() != 0 {
		t.Fatal("the pending release did not end")
	}
	w.want(act, Record{Generation: 1})
}

// A pending release is the same write every time, If-Match on the hold's
// acquire version: it never applies to a later hold of this process.
// Planted bug: resolveRelease retrying If-Match on the version it read
// when the record names this process (adopting a later version) releases
// the live hold at generation 2 and this test fails.
func TestPendingReleaseNeverAppliesToLaterHold(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	h := w.acquire(a, act)
	w.releaseFails(a, h, faulty.Fail)
	w.acquireAt(a, act, 2)
	w.resolvedKeeping(a, act, Record{Node: "a", Instance: "ia", Generation: 2})
}

// An acquisition held in flight past its timeout lands later: the
// background pass finds it naming this process with no hold here and
// releases it; the next acquisition is a generation above.
func TestLateAcquireReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, _ := w.node("a", "ia")
		w.fb.Next(faulty.Put, "owners/", faulty.Hold)
		done := make(chan error, 1)
		go func() { _, err := a.Acquire(ctx, act); done <- err }()
		w.clk.Step(5 * time.Second)
		if err := <-done; !errors.Is(err, ErrUnresolved) {
			t.Fatalf("acquire: %v, want unresolved", err)
		}
		if a.Resolve(ctx) != 0 || a.Pending() != 1 {
			t.Fatal("an unresolved acquire of an unchanged record ended before the write could land")
		}
		if w.fb.Land() != 1 {
			t.Fatal("the held write did not land")
		}
		w.want(act, Record{Node: "a", Instance: "ia", Generation: 1})
		if a.Resolve(ctx) != 1 || a.Pending() != 0 {
			t.Fatal("not resolved")
		}
		w.want(act, Record{Generation: 1})
		w.acquireAt(a, act, 2)
	})
}

// An acquisition that failed leaves an unresolved entry at generation 1;
// a second acquisition lands at that same generation and holds it. The
// background pass must end the entry, not release the live hold. Planted
// bug: resolveAcquire ignoring the holds here releases it and this test
// fails.
func TestUnresolvedAcquireSparesLiveHold(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	w.fb.Next(faulty.Put, "owners/", faulty.Fail)
	if _, err := a.Acquire(ctx, act); !errors.Is(err, ErrUnresolved) {
		t.Fatalf("acquire: %v", err)
	}
	w.acquireAt(a, act, 1)
	w.resolvedKeeping(a, act, Record{Node: "a", Instance: "ia", Generation: 1})
}

// A lapse drops every hold into the pending releases; the pass waits while
// the lease is invalid and releases them once it is valid again; the
// actors are then acquired afresh at new generations.
func TestLapseDropsHoldsIntoPending(t *testing.T) {
	w := newWorld(t)
	a, l := w.node("a", "ia")
	actors := []Actor{{"t", "c", "x"}, {"t", "c", "y"}, {"t", "c", "z"}}
	for _, x := range actors {
		w.acquire(a, x)
	}
	h := w.acquire(a, actors[0])
	l.set(false)
	a.DropAll()
	if err := a.Release(ctx, h); !errors.Is(err, ErrReleasePending) {
		t.Fatalf("a release after the lapse: %v, want pending", err)
	}
	if len(a.Holds()) != 0 || a.Pending() != 3 {
		t.Fatalf("holds %d pending %d", len(a.Holds()), a.Pending())
	}
	if _, err := a.Acquire(ctx, actors[0]); !errors.Is(err, ErrLeaseInvalid) {
		t.Fatalf("acquire with the lease invalid: %v", err)
	}
	if a.Resolve(ctx) != 0 {
		t.Fatal("resolved while the lease was invalid")
	}
	l.set(true)
	if a.Resolve(ctx) != 3 {
		t.Fatal("not resolved")
	}
	for _, x := range actors {
		w.want(x, Record{Generation: 1})
		w.acquireAt(a, x, 2)
	}
}

// The routing read answers within its 250 ms even when the bucket hangs.
func TestOwnerReadBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, _ := w.node("a", "ia")
		b, _ := w.node("b", "ib")
		w.acquire(b, act)
		if r, found, err := a.Owner(ctx, act); err != nil || !found || r.Node != "b" {
			t.Fatalf("owner: %+v %v %v", r, found, err)
		}
		w.fb.Next(faulty.Get, "owners/", faulty.Hang)
		done := make(chan error, 1)
		go func() { _, _, err := a.Owner(ctx, act); done <- err }()
		w.clk.Step(OwnerTimeout)
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a hung read succeeded")
			}
		default:
			t.Fatal("the owner read outlived its 250 ms")
		}
	})
}

// Two nodes acquire and release actors at random over a bucket that fails
// and loses replies at random (seeded), resolving in the background. At
// every step at most one node holds an actor, and no generation serves
// two holds.
func TestRandomNeverTwoHolders(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newWorld(t)
			w.fb.Random(seed, map[faulty.Kind]float64{faulty.Fail: 0.15, faulty.LostReply: 0.15})
			a, _ := w.node("a", "ia")
			b, _ := w.node("b", "ib")
			nodes := []*Owners{a, b}
			rng := rand.New(rand.NewPCG(seed, 1))
			actors := []Actor{{"t", "c", "0"}, {"t", "c", "1"}, {"t", "c", "2"}}
			type hold struct {
				a Actor
				g uint64
			}
			seen := map[hold]int{}
			for range 300 {
				n := rng.IntN(2)
				o, x := nodes[n], actors[rng.IntN(len(actors))]
				switch rng.IntN(3) {
				case 0:
					_, had := o.Owns(x)
					if h, err := o.Acquire(ctx, x); err == nil && !had {
						if prev, ok := seen[hold{x, h.Generation}]; ok {
							t.Fatalf("generation %d of %s made two holds (nodes %d and %d)", h.Generation, x, prev, n)
						}
						seen[hold{x, h.Generation}] = n
					}
				case 1:
					if h, ok := o.Owns(x); ok {
						o.Release(ctx, h)
					}
				case 2:
					o.Resolve(ctx)
				}
				for _, y := range actors {
					_, ha := a.Owns(y)
					_, hb := b.Owns(y)
					if ha && hb {
						t.Fatalf("both nodes hold %s", y)
					}
				}
			}
			if len(seen) < 10 || w.fb.Counts[faulty.LostReply] == 0 {
				t.Fatalf("a run proving nothing: %d holds, faults %v", len(seen), w.fb.Counts)
			}
		})
	}
}

// The actor's lock keeps the background pass from reading a record that a
// second, in-flight acquisition just wrote at the generation of an
// unresolved one, and releasing it after that acquisition registered its
// hold. Planted bug: Resolve not taking the actor's lock lets its release
// land under the live hold and this test fails.
func TestActorLockOrdersResolverAndAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, _ := w.node("a", "ia")
		w.fb.Next(faulty.Put, "owners/", faulty.Fail)
		if _, err := a.Acquire(ctx, act); !errors.Is(err, ErrUnresolved) {
			t.Fatalf("acquire: %v", err)
		}
		w.fb.Next(faulty.Put, "owners/", faulty.Hold) // the second acquisition's write
		w.fb.Next(faulty.Put, "owners/", faulty.Hold) // a release the pass would send
		acquired := make(chan error, 1)
		go func() { _, err := a.Acquire(ctx, act); acquired <- err }()
		synctest.Wait()
		if w.fb.Land() != 1 { // it landed; its caller has not heard yet
			t.Fatal("the second acquisition's write was not held")
		}
		resolved := make(chan int, 1)
		go func() { resolved <- a.Resolve(ctx) }()
		w.clk.Step(6 * time.Second)
		if err := <-acquired; err != nil {
			t.Fatalf("second acquisition: %v", err)
		}
		<-resolved
		w.fb.Land()
		w.want(act, Record{Node: "a", Instance: "ia", Generation: 1})
		if _, owns := a.Owns(act); !owns {
			t.Fatal("the hold is gone")
		}
	})
}

// A pass stops after MaxRefusals entries in a row that did not end, so a
// refusing bucket gets no burst of writes.
func TestPassStopsAfterRefusals(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	for i := range 40 {
		h := w.acquire(a, Actor{"t", "c", fmt.Sprint(i)})
		w.releaseFails(a, h, faulty.Fail)
	}
	w.fb.Random(1, map[faulty.Kind]float64{faulty.Fail: 1})
	before := w.fb.Counts[faulty.Fail]
	if a.Resolve(ctx) != 0 {
		t.Fatal("entries ended against a failing bucket")
	}
	if tried := w.fb.Counts[faulty.Fail] - before; tried != 2*MaxRefusals { // a write and a read each
		t.Fatalf("%d requests in one pass, want %d", tried, 2*MaxRefusals)
	}
	w.fb.Random(1, nil)
	if a.Resolve(ctx) != 40 || a.Pending() != 0 {
		t.Fatalf("pending %d", a.Pending())
	}
}

// A foreground release waits at most ReleaseTimeout on a hung bucket, then
// is pending.
func TestForegroundReleaseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, _ := w.node("a", "ia")
		h := w.acquire(a, act)
		w.fb.Next(faulty.Put, "owners/", faulty.Hang)
		done := make(chan error, 1)
		go func() { done <- a.Release(ctx, h) }()
		w.clk.Step(ReleaseTimeout)
		select {
		case err := <-done:
			if !errors.Is(err, ErrReleasePending) {
				t.Fatalf("release: %v", err)
			}
		default:
			t.Fatal("the release outlived ReleaseTimeout")
		}
		if a.Resolve(ctx) != 1 {
			t.Fatal("not resolved")
		}
	})
}

// The hold check every event passes (issue 24, item 1): a hold passes it
// only while it is this process's very hold and the lease is valid; a
// lapse ends it for good, even once the lease is valid again and the
// actor acquired anew, and so does a release.
func TestCheckFollowsTheHold(t *testing.T) {
	w := newWorld(t)
	a, l := w.node("a", "ia")
	x := Actor{"t", "c", "x"}
	h := w.acquire(a, x)
	if err := a.Check(h); err != nil {
		t.Fatalf("a hold just acquired: %v", err)
	}
	l.set(false)
	if err := a.Check(h); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("with the lease invalid: %v, want ErrNotHeld", err)
	}
	a.DropAll()
	l.set(true)
	if err := a.Check(h); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("after a lapse, the lease valid again: %v, want ErrNotHeld", err)
	}
	a.Resolve(ctx)
	h2 := w.acquireAt(a, x, 2)
	if err := a.Check(h); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("the hold before the lapse, the actor held again at generation 2: %v, want ErrNotHeld", err)
	}
	if err := a.Check(h2); err != nil {
		t.Fatalf("the new hold: %v", err)
	}
	if err := a.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(h2); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("a released hold: %v, want ErrNotHeld", err)
	}
}

// An expiry's acquire (AcquireUnchanged) takes the actor only at the
// version listed, naming nobody: a wake and release since the listing, a
// record naming a holder, or a hold of this process refuses it with
// ErrChanged and writes nothing. Fails with the write conditioned on the
// version read rather than the one listed.
func TestAcquireUnchanged(t *testing.T) {
	w := newWorld(t)
	a, _ := w.node("a", "ia")
	b, _ := w.node("b", "ib")
	listed := func() bucket.Version {
		page, err := w.mem.List(ctx, act.Key(), bucket.ListOptions{})
		if err != nil || len(page.Entries) != 1 {
			t.Fatalf("listing %s: %v %v", act.Key(), page.Entries, err)
		}
		return page.Entries[0].Version
	}
	h := w.acquire(b, act)
	held := listed()
	if _, err := a.AcquireUnchanged(ctx, act, held); !errors.Is(err, ErrChanged) {
		t.Fatalf("a record naming a holder: %v, want ErrChanged", err)
	}
	b.Release(ctx, h)
	old := listed()
	b.Release(ctx, w.acquire(b, act)) // a wake since the listing
	if _, err := a.AcquireUnchanged(ctx, act, old); !errors.Is(err, ErrChanged) {
		t.Fatalf("a record rewritten since the listing: %v, want ErrChanged", err)
	}
	w.want(act, Record{Generation: 2})
	got, err := a.AcquireUnchanged(ctx, act, listed())
	if err != nil || got.Generation != 3 {
		t.Fatalf("the record as listed: %+v %v, want generation 3", got, err)
	}
	if _, err := a.AcquireUnchanged(ctx, act, listed()); !errors.Is(err, ErrChanged) {
		t.Fatalf("a hold of this process: %v, want ErrChanged", err)
	}
}
