package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// watched records what a Follower told its node.
type watched struct {
	f       *Follower
	clock   *clock.Manual
	opened  []Current
	blocked error // the last reason given, nil once unblocked
	blocks  int   // reasons given
}

func follow(b bucket.Bucket, keys ...Key) *watched {
	w := &watched{clock: clock.NewManual(time.Unix(1_000_000, 0))}
	w.f = NewFollower(FollowerConfig{Bucket: b, Place: shop, Keys: keys, Clock: w.clock,
		Opened:  func(c Current) { w.opened = append(w.opened, c) },
		Blocked: func(err error) { w.blocked = err; w.blocks++ },
	})
	return w
}

// after moves the clock on by d and reads current, as Run would.
func (w *watched) after(t *testing.T, d time.Duration) {
	w.clock.Advance(d)
	w.f.poll(t.Context())
}

func (w *watched) value(t *testing.T) string {
	t.Helper()
	if len(w.opened) == 0 {
		t.Fatal("no set opened")
	}
	v, _ := w.opened[len(w.opened)-1].Set.Value("api", "TOKEN")
	return v
}

func setCurrent(t *testing.T, b *outage, seq uint64) {
	putObject(t, b.Memory, shop.currentKey(), seqName(seq)+"\n")
}

// outage is a bucket that can stop answering.
// outage is a bucket that can stop answering, and counts the reads of
// sealed objects.
type outage struct {
	*buckettest.Memory
	down    atomic.Bool
	objects atomic.Int32
}

func (o *outage) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if o.down.Load() {
		return nil, bucket.ErrTransient
	}
	if !strings.HasSuffix(key, "/current") {
		o.objects.Add(1)
	}
	return o.Memory.Get(ctx, key, opts)
}

func newOutage() *outage { return &outage{Memory: newBucket()} }

func TestFollowerOpensEachNewSet(t *testing.T) {
	k := testKey(t, 1)
	b := newOutage()
	w := follow(b, k)
	w.f.Start(t.Context())
	if len(w.opened) != 1 || w.opened[0].Seq != 0 || w.blocked != nil {
		t.Fatalf("no secrets yet: opened %v, blocked %v", w.opened, w.blocked)
	}
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
	w.after(t, 3*time.Second)
	if w.value(t) != "one" || w.opened[1].Seq != 1 {
		t.Fatalf("after the first set: %v", w.opened)
	}
	w.after(t, 3*time.Second) // unchanged: not opened again
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "two")})
	w.after(t, 3*time.Second)
	if len(w.opened) != 3 || w.value(t) != "two" || w.blocks != 0 {
		t.Fatalf("after the second set: %v, %d blocks", w.opened, w.blocks)
	}
	// current deleted by hand: the node keeps the set it has.
	b.Memory.Delete(t.Context(), shop.currentKey(), bucket.Condition{})
	w.after(t, time.Minute)
	if len(w.opened) != 3 || w.blocked != nil {
		t.Fatalf("current deleted: %v, blocked %v", w.opened, w.blocked)
	}
}

// A lower seq is refused, and blocks once the window passes without the
// set current names opened; the highest seq back again unblocks.
func TestFollowerNeverGoesBack(t *testing.T) {
	k := testKey(t, 1)
	b := newOutage()
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "two")})
	w := follow(b, k)
	w.f.Start(t.Context())
	setCurrent(t, b, 1)
	w.after(t, 3*time.Second)
	w.after(t, 26*time.Second) // 29 s since the set was last known current
	if len(w.opened) != 1 || w.blocked != nil {
		t.Fatalf("within the window: opened %v, blocked %v", w.opened, w.blocked)
	}
	w.after(t, time.Second)
	if !errors.Is(w.blocked, errLower) || len(w.opened) != 1 {
		t.Fatalf("past the window: opened %v, blocked %v; want %v", w.opened, w.blocked, errLower)
	}
	setCurrent(t, b, 2)
	w.after(t, 3*time.Second)
	if w.blocked != nil || len(w.opened) != 1 || w.blocks != 2 {
		t.Fatalf("current back on seq 2: opened %v, blocked %v, %d blocks", w.opened, w.blocked, w.blocks)
	}
}

// A set the node cannot open blocks at once, at start or later; a reset
// it can open unblocks.
func TestFollowerBlocksAtOnce(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	obj := shop.objectKey(2)
	for _, c := range []struct {
		name  string
		keys  []Key
		alter func(*outage)
		want  error
	}{
		{"no key", nil, nil, ErrNoKey},
		{"another key", []Key{other}, nil, ErrOtherKey},
		{"a flipped byte", []Key{k}, func(b *outage) {
			s := []byte(objectText(t, b.Memory, obj))
			s[len(s)-3] ^= 1 // a hex digit of the tag
			putObject(t, b.Memory, obj, string(s))
		}, ErrAltered},
		{"copied from another app", []Key{k}, func(b *outage) {
			src := newBucket()
			elsewhere := Place{Prefix: "prod", App: shop.App}
			elsewhere.App.App = "shop2"
			write(t, src, elsewhere, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
			write(t, src, elsewhere, Change{Seal: k, Apply: put("api", "TOKEN", "two")})
			putObject(t, b.Memory, obj, objectText(t, src, elsewhere.objectKey(2)))
		}, ErrOtherPlace},
	} {
		for _, atStart := range []bool{true, false} {
			b := newOutage()
			write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
			w := follow(b, c.keys...)
			if !atStart {
				w.f.Start(t.Context())
				if c.keys == nil || c.keys[0] == other { // cannot open seq 1 either
					continue
				}
			}
			write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "two")})
			if c.alter != nil {
				c.alter(b)
			}
			opened := len(w.opened)
			if atStart {
				w.f.Start(t.Context())
			} else {
				w.after(t, 3*time.Second)
			}
			if !errors.Is(w.blocked, c.want) || len(w.opened) != opened {
				t.Errorf("%s (at start %v): blocked %v, opened %v; want %v", c.name, atStart, w.blocked, w.opened, c.want)
				continue
			}
			noValue(t, c.name, w.blocked.Error())
			if strings.Contains(w.blocked.Error(), "one") || strings.Contains(w.blocked.Error(), "two") {
				t.Errorf("%s: the reason holds a value: %v", c.name, w.blocked)
			}
			write(t, b.Memory, shop, Change{Seal: other, Reset: true, NodesHaveKey: true, Apply: put("api", "TOKEN", "three")})
			w.f.cfg.Keys = append(w.f.cfg.Keys, other)
			w.after(t, 3*time.Second) // a new seq: read at once, whatever the backoff
			if w.blocked != nil || w.value(t) != "three" {
				t.Errorf("%s (at start %v): after the reset: blocked %v", c.name, atStart, w.blocked)
			}
		}
	}
}

// A missing object or a corrupt current blocks only once the window
// passes; a bucket that does not answer keeps the set, however long.
func TestFollowerWindow(t *testing.T) {
	k := testKey(t, 1)
	for _, c := range []struct {
		name  string
		alter func(*outage)
		want  error
	}{
		{"a missing object", func(b *outage) { setCurrent(t, b, 7) }, ErrMissing},
		{"a corrupt current", func(b *outage) { putObject(t, b.Memory, shop.currentKey(), "seven\n") }, ErrCorruptCurrent},
		{"an oversized current", func(b *outage) { putObject(t, b.Memory, shop.currentKey(), strings.Repeat("0", 100)+"\n") }, ErrCorruptCurrent},
		{"an outage", func(b *outage) { b.down.Store(true) }, nil},
	} {
		b := newOutage()
		write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
		w := follow(b, k)
		w.f.Start(t.Context())
		c.alter(b)
		for range 9 { // 27 s
			w.after(t, 3*time.Second)
		}
		if w.blocked != nil {
			t.Errorf("%s: blocked within the window: %v", c.name, w.blocked)
		}
		w.after(t, 3*time.Second)
		w.after(t, 10*time.Minute)
		if c.want == nil && w.blocked != nil || c.want != nil && !errors.Is(w.blocked, c.want) {
			t.Errorf("%s: past the window, blocked %v; want %v", c.name, w.blocked, c.want)
		}
		if len(w.opened) != 1 || w.value(t) != "one" {
			t.Errorf("%s: opened %v", c.name, w.opened)
		}
	}
	// A node that opened nothing yet starts blocked on an outage: no
	// event runs without the set.
	b := newOutage()
	b.down.Store(true)
	w := follow(b, k)
	w.f.Start(t.Context())
	if !errors.Is(w.blocked, errOutage) {
		t.Fatalf("an outage at start: blocked %v", w.blocked)
	}
	b.down.Store(false)
	w.after(t, 3*time.Second)
	if w.blocked != nil || len(w.opened) != 1 {
		t.Fatalf("the bucket back: blocked %v, opened %v", w.blocked, w.opened)
	}
}

// The window starts when the set current names is first found unopened:
// an outage before it does not shorten it.
func TestFollowerWindowAfterAnOutage(t *testing.T) {
	k := testKey(t, 1)
	b := newOutage()
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
	w := follow(b, k)
	w.f.Start(t.Context())
	b.down.Store(true)
	for range 20 { // 60 s
		w.after(t, 3*time.Second)
	}
	b.down.Store(false)
	setCurrent(t, b, 9) // its object not there yet
	w.after(t, 3*time.Second)
	if w.blocked != nil {
		t.Fatalf("blocked on the first poll that found seq 9 unopened: %v", w.blocked)
	}
	w.after(t, 10*time.Minute)
	if !errors.Is(w.blocked, ErrMissing) {
		t.Fatalf("past the window: blocked %v, want ErrMissing", w.blocked)
	}
}

// An object that could not be opened is read again only after a wait,
// Period doubled per failure up to MaxBackoff; current, every period.
func TestFollowerBackoff(t *testing.T) {
	k := testKey(t, 1)
	b := newOutage()
	write(t, b.Memory, shop, Change{Seal: k, Apply: put("api", "TOKEN", "one")})
	w := follow(b, k)
	w.f.Start(t.Context())
	setCurrent(t, b, 7) // missing
	var reads []int32
	for range 12 { // 36 s
		before := b.objects.Load()
		w.after(t, 3*time.Second)
		reads = append(reads, b.objects.Load()-before)
	}
	// Read at 3 s, then 6, 12 and 10 (the bound) s later, at the next poll:
	// 9, 21, 33.
	want := []int32{1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0}
	if fmt.Sprint(reads) != fmt.Sprint(want) {
		t.Errorf("object reads per poll: %v, want %v", reads, want)
	}
	if !errors.Is(w.blocked, ErrMissing) {
		t.Errorf("past the window: blocked %v", w.blocked)
	}
}
