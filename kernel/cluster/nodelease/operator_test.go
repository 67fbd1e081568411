package nodelease

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
)

// bucketClock is a bucket whose reads give every object the modification
// time at, and which runs beforePut (once) before the first Put of a key
// under nodes/.
type bucketClock struct {
	bucket.Bucket
	at        time.Time
	beforePut func()
	puts      int
}

func (b *bucketClock) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	o, err := b.Bucket.Get(ctx, key, opts)
	if err == nil && !b.at.IsZero() {
		o.ModTime = b.at
	}
	return o, err
}

func (b *bucketClock) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if f := b.beforePut; f != nil && strings.HasPrefix(key, Prefix) {
		b.beforePut = nil
		f()
	}
	b.puts++
	return b.Bucket.Put(ctx, key, body, size, cond)
}

func putObject(t *testing.T, b bucket.Bucket, id string, o Object) {
	t.Helper()
	if _, err := writeObject(context.Background(), b, id, o, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func readObject(t *testing.T, b bucket.Bucket, id string) Read {
	t.Helper()
	r, err := ReadObject(context.Background(), b, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A live object is replaced by a fence keeping its instance, seq,
// written_at and info, whatever its age: the operator needs no watch.
func TestOperatorFencesLiveKeepingWrittenAt(t *testing.T) {
	clk := clock.NewManual(simtest.Epoch)
	b := &bucketClock{Bucket: buckettest.NewMemory(buckettest.Flaws{}), at: simtest.Epoch.Add(time.Hour)}
	live := Object{State: Live, Instance: "i1", Seq: 9, WrittenAt: clk.Now().Add(-time.Second), Info: Info{Advertise: "http://a:1"}}
	putObject(t, b, "a", live)
	got, err := FenceByOperator(context.Background(), b, "a", clk.Now())
	if err != nil || got.Did != FencedLive {
		t.Fatalf("%v %v, want fenced", got.Did, err)
	}
	o := readObject(t, b, "a").Object
	if o.State != Fenced || o.Instance != "i1" || o.Seq != 9 || !o.WrittenAt.Equal(live.WrittenAt) || o.Info.Advertise != "http://a:1" {
		t.Fatalf("fence %+v does not keep the live write's instance, seq, written_at and info", o)
	}
	if !got.Object.WrittenAt.Equal(live.WrittenAt) {
		t.Fatalf("reported written_at %v, want %v", got.Object.WrittenAt, live.WrittenAt)
	}
}

// With no object, a fence with no instance is created, dated by the
// bucket's time for that write when it is later than the operator's
// clock (a whole-second time counting as the end of its second), and by
// the operator's clock when the bucket's is earlier.
func TestOperatorCreatesFenceDatedByLaterClock(t *testing.T) {
	now := simtest.Epoch.Add(123 * time.Millisecond)
	for _, c := range []struct {
		name       string
		bucketTime time.Time
		want       time.Time
	}{
		{"bucket ahead", now.Add(2*time.Second + 500*time.Millisecond), now.Add(2*time.Second + 500*time.Millisecond)},
		{"bucket ahead, whole seconds", simtest.Epoch.Add(3 * time.Second), simtest.Epoch.Add(3*time.Second + 999*time.Millisecond)},
		{"bucket behind", now.Add(-time.Minute), now},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &bucketClock{Bucket: buckettest.NewMemory(buckettest.Flaws{}), at: c.bucketTime}
			got, err := FenceByOperator(context.Background(), b, "gone", now)
			if err != nil || got.Did != FencedAbsent {
				t.Fatalf("%v %v, want a fence created", got.Did, err)
			}
			o := readObject(t, b, "gone").Object
			if o.State != Fenced || o.Instance != "" || !o.WrittenAt.Equal(c.want) || !got.Object.WrittenAt.Equal(c.want) {
				t.Fatalf("fence %+v (reported %v), want fenced with no instance dated %v", o, got.Object.WrittenAt, c.want)
			}
		})
	}
}

// A fenced or released object is left as it is; an object that is not
// format 3 is replaced by a fence dated now.
func TestOperatorLeavesFencedAndReleased(t *testing.T) {
	now := simtest.Epoch
	b := &bucketClock{Bucket: buckettest.NewMemory(buckettest.Flaws{}), at: now.Add(-time.Minute)}
	for id, st := range map[string]State{"f": Fenced, "r": Released} {
		putObject(t, b, id, Object{State: st, Instance: "i1", Seq: 3, WrittenAt: now.Add(-time.Hour)})
	}
	b.puts = 0
	if got, err := FenceByOperator(context.Background(), b, "f", now); err != nil || got.Did != WasFenced || !got.Object.WrittenAt.Equal(now.Add(-time.Hour)) {
		t.Errorf("fenced: %+v %v, want left fenced", got, err)
	}
	if got, err := FenceByOperator(context.Background(), b, "r", now); err != nil || got.Did != WasReleased {
		t.Errorf("released: %+v %v, want left released", got, err)
	}
	if b.puts != 0 {
		t.Errorf("%d writes over objects already not live", b.puts)
	}
	if _, err := b.Put(context.Background(), Key("x"), strings.NewReader("garbage"), 7, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	got, err := FenceByOperator(context.Background(), b, "x", now)
	if err != nil || got.Did != FencedUnreadable || got.Unreadable == nil {
		t.Fatalf("unreadable: %+v %v", got, err)
	}
	if o := readObject(t, b, "x"); o.Err != nil || o.Object.State != Fenced || !o.Object.WrittenAt.Equal(now) {
		t.Fatalf("unreadable replaced by %+v", o)
	}
	if _, err := FenceByOperator(context.Background(), b, "Bad", now); err == nil {
		t.Error("a malformed node id was accepted")
	}
}

// The node renews between the operator's read and its fence: the fence's
// condition fails, and the operator reads and decides again, fencing the
// renewed write (keeping its written_at). Likewise a node lease created
// between the read that found nothing and the create.
func TestOperatorDecidesAgainOnConflict(t *testing.T) {
	now := simtest.Epoch
	mem := buckettest.NewMemory(buckettest.Flaws{})
	b := &bucketClock{Bucket: mem}
	putObject(t, mem, "a", Object{State: Live, Instance: "i1", Seq: 4, WrittenAt: now.Add(-3 * time.Second)})
	renewed := Object{State: Live, Instance: "i1", Seq: 5, WrittenAt: now}
	b.beforePut = func() { putObject(t, mem, "a", renewed) }
	got, err := FenceByOperator(context.Background(), b, "a", now)
	if err != nil || got.Did != FencedLive {
		t.Fatalf("%v %v, want fenced", got.Did, err)
	}
	if o := readObject(t, mem, "a").Object; o.State != Fenced || o.Seq != 5 || !o.WrittenAt.Equal(now) {
		t.Fatalf("fence %+v, want the renewed write (seq 5) fenced", o)
	}
	if b.puts != 2 {
		t.Fatalf("%d fence writes, want 2 (one refused, one decided again)", b.puts)
	}

	b.beforePut = func() { putObject(t, mem, "late", Object{State: Live, Instance: "j", Seq: 1, WrittenAt: now}) }
	got, err = FenceByOperator(context.Background(), b, "late", now)
	if err != nil || got.Did != FencedLive || got.Object.Instance != "j" {
		t.Fatalf("created under the operator: %+v %v, want the new live object fenced", got, err)
	}
}

// A running node lease sees the operator's fence at its next write: the
// lease is lost (Lost called once, Valid false), and nothing more is
// written over the fence.
func TestOperatorFenceStopsRunningLease(t *testing.T) {
	sim(t, func(t *testing.T, w *world) {
		a := w.running("a", "i1")
		got, err := FenceByOperator(ctx, w.mem, "a", w.clk.Now())
		if err != nil || got.Did != FencedLive {
			t.Fatalf("%v %v, want fenced", got.Did, err)
		}
		if !w.clk.Until(a.Settings().Period()+time.Second, func() bool { return a.saw("lost") }) {
			t.Fatal("the lease did not see the fence at its next write")
		}
		if a.Valid() || !errors.Is(a.Lost(), ErrLost) || !strings.Contains(a.Lost().Error(), "fenced") {
			t.Fatalf("after the fence: valid %v, lost %v", a.Valid(), a.Lost())
		}
		w.clk.Step(10 * time.Second)
		if r := w.object("a"); r.Object.State != Fenced || r.Object.Instance != "i1" {
			t.Fatalf("the fence was overwritten: %+v", r.Object)
		}
	})
}
