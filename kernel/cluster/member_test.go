package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

func config(b bucket.Bucket, clk *simtest.Clock, instance string, lost func(error)) Config {
	return Config{Bucket: b, Clock: clk, Settings: nodelease.DefaultSettings(), NodeID: "a", Instance: instance,
		Info: nodelease.Info{Advertise: "http://127.0.0.1:" + instance}, Lost: lost, Logger: slog.New(slog.DiscardHandler)}
}

// join runs Join while the clock moves, as the start check waits on it.
func join(t *testing.T, clk *simtest.Clock, cfg Config) (*Member, error) {
	t.Helper()
	var m *Member
	var err error
	done := make(chan struct{})
	go func() { m, err = Join(context.Background(), cfg); close(done) }()
	if !clk.Until(time.Minute, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("Join did not end within a minute")
	}
	return m, err
}

// A member is ready once its start check and first write passed, takes
// actors, and refuses a second process with its id, naming it; Leave
// releases its holds and then its lease, after which a new process need not
// wait ttl + grace of its own.
func TestJoinAndLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		m, err := join(t, clk, config(mem, clk, "p1", nil))
		if err != nil {
			t.Fatal(err)
		}
		if clk.Since() < nodelease.DefaultSettings().Takeover() {
			t.Errorf("a first start waited %v, under ttl + grace", clk.Since())
		}
		if !m.Ready() {
			t.Fatal("not ready after Join")
		}
		actor := ownership.Actor{Tenant: "default", Class: "counter", Name: "x"}
		if _, err := m.Owners.Acquire(ctx, actor); err != nil {
			t.Fatal(err)
		}

		_, err = join(t, clk, config(mem, clk, "p2", nil))
		var twin *nodelease.TwinError
		if !errors.As(err, &twin) || twin.Advertise != "http://127.0.0.1:p1" {
			t.Fatalf("a twin: %v, want a TwinError naming the first process", err)
		}

		if err := m.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if m.Ready() {
			t.Error("ready after Leave")
		}
		rec, _, err := m.Owners.Owner(ctx, actor)
		if err != nil || !rec.Nobody() {
			t.Errorf("the hold after Leave: %+v, %v", rec, err)
		}
		// Once the released lease's last live write is ttl + grace old, a
		// new process waits only for its first reads (a fresh wait would be
		// another ttl + grace).
		clk.Step(nodelease.DefaultSettings().Takeover())
		start := clk.Since()
		m2, err := join(t, clk, config(mem, clk, "p3", nil))
		if err != nil {
			t.Fatal(err)
		}
		if took := clk.Since() - start; took > 3*time.Second {
			t.Errorf("a start after a clean stop waited %v", took)
		}
		if err := m2.Leave(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A member whose lease another writer replaced calls Lost, drops its holds
// without writing, and is no longer ready.
func TestLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		lost := make(chan error, 1)
		m, err := join(t, clk, config(mem, clk, "p1", func(err error) { lost <- err }))
		if err != nil {
			t.Fatal(err)
		}
		actor := ownership.Actor{Tenant: "default", Class: "counter", Name: "x"}
		if _, err := m.Owners.Acquire(ctx, actor); err != nil {
			t.Fatal(err)
		}
		r, err := nodelease.ReadObject(ctx, mem, "a")
		if err != nil {
			t.Fatal(err)
		}
		o := r.Object
		o.State = nodelease.Fenced
		body := o.Encode()
		if _, err := mem.Put(ctx, nodelease.Key("a"), bytes.NewReader(body), int64(len(body)), bucket.Condition{IfVersion: r.Version}); err != nil {
			t.Fatal(err)
		}
		var got error
		clk.Until(time.Minute, func() bool {
			select {
			case got = <-lost:
				return true
			default:
				return false
			}
		})
		if !errors.Is(got, nodelease.ErrLost) {
			t.Fatalf("Lost: %v", got)
		}
		if m.Ready() || len(m.Owners.Holds()) != 0 {
			t.Errorf("after the loss: ready %v, holds %v", m.Ready(), m.Owners.Holds())
		}
		<-m.done // the background pass ended with the lease
	})
}

// A member whose lease writes do not land lapses: its holds are dropped
// and it is not ready, already when Lapsed is called; once a write lands
// it is ready again, its readiness read from the lease.
func TestLapseAndRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		fb := faulty.New(mem)
		cfg := config(fb, clk, "p1", nil)
		var m *Member
		lapsed := 0
		readyInLapsed := true
		cfg.Lapsed = func(int) {
			lapsed++
			readyInLapsed = m.Ready() || len(m.Owners.Holds()) != 0
		}
		m, err := join(t, clk, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Owners.Acquire(ctx, ownership.Actor{Tenant: "default", Class: "counter", Name: "x"}); err != nil {
			t.Fatal(err)
		}
		fb.Cut(true)
		if !clk.Until(20*time.Second, func() bool { return lapsed == 1 }) {
			t.Fatal("no lapse while the bucket was cut off")
		}
		if readyInLapsed || m.Ready() {
			t.Errorf("ready (or holding) in Lapsed: %v; ready after: %v", readyInLapsed, m.Ready())
		}
		fb.Cut(false)
		if !clk.Until(10*time.Second, m.Ready) {
			t.Fatal("not ready again after the bucket came back")
		}
		if !clk.Until(time.Minute, func() bool { return m.Owners.Pending() == 0 }) {
			t.Fatal("the dropped hold's release never landed")
		}
		if err := m.Leave(ctx); err != nil || m.Ready() {
			t.Fatalf("Leave: %v, ready %v", err, m.Ready())
		}
	})
}

// A member fences a peer that stopped renewing its lease, once the full
// watch and ttl + grace have passed, and the peer, back on the bucket,
// finds its lease lost; a live peer is never fenced.
// joinBoth joins two members side by side, as two nodes start at once,
// moving clk until both joined.
func joinBoth(t *testing.T, clk *simtest.Clock, cfgA, cfgB Config) (a, b *Member) {
	t.Helper()
	var errA, errB error
	done := make(chan struct{}, 2)
	go func() { a, errA = Join(context.Background(), cfgA); done <- struct{}{} }()
	go func() { b, errB = Join(context.Background(), cfgB); done <- struct{}{} }()
	n := 0
	clk.Until(time.Minute, func() bool {
		select {
		case <-done:
			n++
		default:
		}
		return n == 2
	})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	return a, b
}

func TestMembersFenceASilentPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		fenced := make(chan string, 4)
		cfgA := config(mem, clk, "pa", nil)
		cfgA.Fenced = func(peer string) { fenced <- peer }
		lostB := make(chan error, 1)
		fb := faulty.New(mem)
		cfgB := config(fb, clk, "pb", func(err error) { lostB <- err })
		cfgB.NodeID = "b"
		a, b := joinBoth(t, clk, cfgA, cfgB)
		watch, stop := context.WithCancel(context.Background())
		defer stop()
		go a.WatchPeers(watch)
		clk.Step(time.Minute) // both renewing: nobody fences
		if len(fenced) != 0 {
			t.Fatalf("a live peer was fenced")
		}
		fb.Cut(true) // b can no longer write its lease
		var peer string
		if !clk.Until(time.Minute, func() bool {
			select {
			case peer = <-fenced:
				return true
			default:
				return false
			}
		}) || peer != "b" {
			t.Fatalf("a silent peer was not fenced within a minute (fenced %q)", peer)
		}
		fb.Cut(false)
		var err error
		clk.Until(time.Minute, func() bool {
			select {
			case err = <-lostB:
				return true
			default:
				return false
			}
		})
		if !errors.Is(err, nodelease.ErrLost) {
			t.Fatalf("the fenced peer back on the bucket: %v, want its lease lost", err)
		}
		stop()
		if err := a.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-b.done
	})
}

// A key under nodes/ that is not a node lease leaves the heartbeat
// listing working: the view takes the live peer beside it, each listing
// counts the key (Config.Skipped), and the log names it once while it
// stays.
func TestWatchPeersSkipsAStrayKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		for key, body := range map[string]string{"nodes/x/extra": "x", "nodes/junk": ""} {
			if _, err := mem.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		var logs bytes.Buffer
		skipped := map[string]int{}
		var mu sync.Mutex
		cfgA := config(mem, clk, "pa", nil)
		cfgA.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfgA.Skipped = func(key string, err error) {
			mu.Lock()
			skipped[key]++
			mu.Unlock()
		}
		cfgB := config(mem, clk, "pb", nil)
		cfgB.NodeID = "b"
		a, b := joinBoth(t, clk, cfgA, cfgB)
		watch, stop := context.WithCancel(context.Background())
		go a.WatchPeers(watch)
		if !clk.Until(time.Minute, func() bool { return a.View.Listings() >= 3 }) {
			t.Fatal("no three listings within a minute")
		}
		stop()
		if _, err := a.View.Live("b"); err != nil {
			t.Errorf("the live peer beside the stray keys: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, key := range []string{"nodes/x/extra", "nodes/junk"} {
			if skipped[key] < 3 {
				t.Errorf("%s skipped %d times in 3 listings", key, skipped[key])
			}
			if c := strings.Count(logs.String(), "key="+key+" "); c != 1 {
				t.Errorf("%s logged %d times, want once:\n%s", key, c, logs.String())
			}
		}
		a.Leave(context.Background())
		b.Leave(context.Background())
	})
}

// An actor with no ownership record but a history in the bucket (its
// record deleted, its history kept) is first acquired at a generation
// above every one its history holds, never at 1 (issue 24, item 7b).
func TestFirstAcquisitionAboveTheHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		m, err := join(t, clk, config(mem, clk, "p1", nil))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Leave(ctx)
		kept := ownership.Actor{Tenant: "default", Class: "c", Name: "kept"}
		for _, k := range []history.Key{{Kind: history.Segment, TXID: 1, Gen: 2}, {Kind: history.Segment, TXID: 2, Gen: 5, Parent: 2}} {
			key := app.Default.StateRoot() + history.EncodedPrefix(kept.Tenant, kept.Class, kept.Name) + k.Rel()
			if _, err := mem.Put(ctx, key, strings.NewReader("x"), 1, bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := m.Owners.Acquire(ctx, kept)
		if err != nil || h.Generation != 6 {
			t.Fatalf("first acquisition over a history at generation 5: %+v %v, want generation 6", h, err)
		}
		if h, err := m.Owners.Acquire(ctx, ownership.Actor{Tenant: "default", Class: "c", Name: "new"}); err != nil || h.Generation != 1 {
			t.Fatalf("first acquisition of an actor with no history: %+v %v, want generation 1", h, err)
		}
	})
}

// A member serves one app: its heartbeat names it, and its ownership
// records are under the app's state root, the node lease on the shared
// root. A malformed app is refused before the bucket is touched.
func TestJoinServesItsApp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		cfg := config(mem, clk, "p1", nil)
		cfg.App = app.Name{Tenant: "acme", App: "shop"}
		m, err := join(t, clk, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Leave(ctx)
		if r, err := nodelease.ReadObject(ctx, mem, "a"); err != nil || r.Object.Info.App != "acme/shop" {
			t.Errorf("nodes/a names app %q (%v), want acme/shop", r.Object.Info.App, err)
		}
		x := ownership.Actor{Tenant: "acme", Class: "c", Name: "x"}
		if _, err := m.Owners.Acquire(ctx, x); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Get(ctx, "state/acme/shop/"+x.Key(), bucket.GetOptions{}); err != nil {
			t.Errorf("the record is not under the app's state root: %v", err)
		}
		bad := config(mem, clk, "p2", nil)
		bad.App = app.Name{Tenant: "acme", App: "Shop"}
		if _, err := Join(ctx, bad); err == nil || !strings.Contains(err.Error(), `app name "Shop" must match`) {
			t.Errorf("Join with app acme/Shop: %v", err)
		}
	})
}

// unanswered is a bucket whose first puts fail as an unreachable store's
// do: Join's probe begins with one.
type unanswered struct {
	bucket.Bucket
	fails int // puts still to fail
}

func (u *unanswered) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if u.fails > 0 {
		u.fails--
		return "", fmt.Errorf("dial tcp 127.0.0.1:9: connect: connection refused (%s): %w", strings.Repeat("a long SDK message ", 60), bucket.ErrTransient)
	}
	return u.Bucket.Put(ctx, key, body, size, cond)
}

// hanging is a bucket whose writes never answer: they end with their
// context.
type hanging struct{ bucket.Bucket }

func (hanging) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// A start whose bucket does not answer gives up after BucketWait with
// ErrNoBucket, counting its probes, and logs the long error once, not at
// every probe; with BucketWait 0 it waits until the bucket answers. It
// gives up at BucketWait, not at the last probe whose full wait would fit
// (fails with the sleep not cut to what is left: given up at 15 s), and
// a probe that hangs is cut there too (fails with the probe not bounded:
// Join never ends).
func TestJoinGivesUpOnABucketThatDoesNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		clk := simtest.New()
		cfg := config(&unanswered{Bucket: buckettest.NewMemory(buckettest.Flaws{}), fails: 1000}, clk, "p1", nil)
		cfg.Logger, cfg.BucketWait = slog.New(slog.NewTextHandler(&logs, nil)), 20*time.Second
		_, err := join(t, clk, cfg)
		if !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), "no answer to 5 probes over 20s") {
			t.Fatalf("Join: %v, want ErrNoBucket after 5 probes (at 0, 1, 3, 7 and 15 s: the next, at 31 s, is past 20 s)", err)
		}
		if clk.Since() != 20*time.Second {
			t.Errorf("gave up after %v, want BucketWait", clk.Since())
		}
		if n := strings.Count(logs.String(), "a long SDK message"); n != 60 || strings.Count(logs.String(), "still does not answer") != 4 {
			t.Errorf("the long error logged %d times over, want once (and 4 short lines):\n%s", n/60, logs.String())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		clk := simtest.New()
		cfg := config(hanging{buckettest.NewMemory(buckettest.Flaws{})}, clk, "p1", nil)
		cfg.BucketWait = 20 * time.Second
		_, err := join(t, clk, cfg)
		if !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), "no answer to 1 probes over 20s") {
			t.Fatalf("Join on a bucket whose probe hangs: %v, want ErrNoBucket after its one probe", err)
		}
		if clk.Since() > 21*time.Second { // a step of the test's clock past it
			t.Errorf("gave up after %v, want BucketWait", clk.Since())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		clk := simtest.New()
		cfg := config(&unanswered{Bucket: buckettest.NewMemory(buckettest.Flaws{}), fails: 4}, clk, "p1", nil)
		m, err := join(t, clk, cfg)
		if err != nil {
			t.Fatalf("Join with no BucketWait once the bucket answers (its fifth probe, at 15 s): %v", err)
		}
		m.Leave(context.Background())
	})
}

// A clean stop's release that did not land at once (a parked record's,
// at the node's stop) is tried again before the lease is written
// released, so the record does not name a stopped process for ttl +
// grace (ADR 1055). Fails with Leave's resolve removed ("1 ownership
// releases did not land").
func TestLeaveRetriesPendingReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, clk := buckettest.NewMemory(buckettest.Flaws{}), simtest.New()
		fb := faulty.New(mem)
		m, err := join(t, clk, config(fb, clk, "p1", nil))
		if err != nil {
			t.Fatal(err)
		}
		actor := ownership.Actor{Tenant: "default", Class: "room", Name: "r"}
		h, err := m.Owners.Acquire(ctx, actor)
		if err != nil || !m.Owners.Park(h) {
			t.Fatalf("acquire: %v, or not parked", err)
		}
		fb.Next(faulty.Put, app.Default.StateRoot()+ownership.Prefix, faulty.Fail)
		if n := m.Owners.ReleaseAllParked(ctx); n != 0 || m.Owners.Pending() != 1 {
			t.Fatalf("released %d with the write refused, pending %d; want 0 and 1", n, m.Owners.Pending())
		}
		if err := m.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, _, err := m.Owners.Owner(ctx, actor); err != nil || !rec.Nobody() {
			t.Fatalf("the record after Leave: %+v, %v; want it naming nobody", rec, err)
		}
	})
}
