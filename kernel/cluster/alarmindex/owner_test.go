package alarmindex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

var (
	ctx   = context.Background()
	alice = history.Actor{Tenant: "acme", Class: "queue", Name: "alice"}
)

// view is an app's state view on a fresh memory bucket, as the node runs
// the index.
func view() bucket.Bucket {
	return bucket.Under(buckettest.NewMemory(buckettest.Flaws{}), "state/acme/shop/")
}

// counter is a nonce source that never repeats.
func counter() Nonces {
	var mu sync.Mutex
	var n uint64
	return NonceFunc(func() uint64 { mu.Lock(); defer mu.Unlock(); n++; return n })
}

// keys lists every key under alarms/.
func keys(t *testing.T, b bucket.Bucket) []string {
	t.Helper()
	entries, err := bucket.ListAll(ctx, b, Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Key)
	}
	slices.Sort(out)
	return out
}

func exists(t *testing.T, b bucket.Bucket, k Key) bool {
	t.Helper()
	obj, err := b.Get(ctx, k.String(), bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	obj.Body.Close()
	return true
}

func list(t *testing.T, b bucket.Bucket, a history.Actor, at int64, gen uint64, n Nonces) Key {
	t.Helper()
	k, err := List(ctx, b, a, at, gen, n)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// R1: every List writes a key of its own, empty, under the hold's
// generation, even for the same actor, time and generation.
func TestListWritesAFreshKeyEachTime(t *testing.T) {
	b, n := view(), counter()
	k1 := list(t, b, alice, 5000, 3, n)
	k2 := list(t, b, alice, 5000, 3, n)
	if k1 == k2 || k1.Tag.Gen != 3 || k2.Tag.Gen != 3 || k1.At != 5000 {
		t.Fatalf("keys %v and %v", k1, k2)
	}
	if got := keys(t, b); !slices.Equal(got, []string{k1.String(), k2.String()}) {
		t.Fatalf("bucket holds %q", got)
	}
	if body := readAll(t, b, k1.String()); body != "" {
		t.Fatalf("an entry holding %q, want nothing", body)
	}
	// The view puts the index under the app's state root.
	root := buckettest.NewMemory(buckettest.Flaws{})
	k := list(t, bucket.Under(root, "state/acme/shop/"), alice, 5000, 3, n)
	obj, err := root.Get(ctx, "state/acme/shop/"+k.String(), bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Body.Close()
}

// R1: a nonce drawn again never writes over an entry: List draws another,
// and a source that only repeats itself writes nothing.
func TestListNeverWritesAnExistingKey(t *testing.T) {
	b := view()
	same := NonceFunc(func() uint64 { return 9 })
	k := list(t, b, alice, 5000, 3, same)
	obj, err := b.Get(ctx, k.String(), bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Body.Close()
	if _, err := List(ctx, b, alice, 5000, 3, same); !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("List with a repeated nonce: %v, want ErrKeyTaken", err)
	}
	after, err := b.Get(ctx, k.String(), bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after.Body.Close()
	if after.Version != obj.Version || len(keys(t, b)) != 1 {
		t.Fatal("the entry was written again")
	}
	// One repeat, then a fresh nonce: written under the fresh one.
	draws := []uint64{9, 10}
	k2 := list(t, b, alice, 5000, 3, NonceFunc(func() uint64 { d := draws[0]; draws = draws[1:]; return d }))
	if k2.Tag.Nonce != 10 {
		t.Fatalf("written under nonce %d", k2.Tag.Nonce)
	}
}

func TestListFailsWithTheBucket(t *testing.T) {
	b := bucket.Under(buckettest.NewMemory(buckettest.Flaws{Unreachable: true}), "state/acme/shop/")
	if _, err := List(ctx, b, alice, 1, 1, counter()); !errors.Is(err, bucket.ErrTransient) {
		t.Fatalf("List on an unreachable bucket: %v", err)
	}
	if _, err := List(ctx, view(), alice, 1, 0, counter()); err == nil {
		t.Fatal("List under generation 0 succeeded")
	}
}

// A name the key can hold only shortened travels in the entry's body, so a
// sweep can still name the actor.
func TestAShortenedNameIsInTheEntry(t *testing.T) {
	b := view()
	long := history.Actor{Tenant: "acme", Class: "queue", Name: strings.Repeat("ü", 100)}
	k := list(t, b, long, 1, 1, counter())
	if _, hashed, _ := k.Actor(); !hashed {
		t.Fatal("the name was not shortened")
	}
	parsed, err := ParseKey(keys(t, b)[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := ResolveActor(ctx, b, parsed)
	if err != nil || got != long || readAll(t, b, k.String()) != long.Name {
		t.Fatalf("ResolveActor = %v, %v", got, err)
	}
	// A short name needs no read.
	short := list(t, b, alice, 1, 1, counter())
	if got, err := ResolveActor(ctx, nil, short); err != nil || got != alice {
		t.Fatalf("ResolveActor = %v, %v", got, err)
	}
	// An entry removed meanwhile is not found; a body that is not the
	// key's name is refused.
	if err := b.Delete(ctx, k.String(), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveActor(ctx, b, k); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("ResolveActor of a removed entry: %v", err)
	}
	other := strings.Repeat("ü", 99) + "x"
	if _, err := b.Put(ctx, k.String(), strings.NewReader(other), int64(len(other)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveActor(ctx, b, k); err == nil {
		t.Fatal("a body naming another actor was accepted")
	}
}

func TestRemoveReplaced(t *testing.T) {
	b, n := view(), counter()
	old := list(t, b, alice, 1000, 2, n)
	cur := list(t, b, alice, 2000, 3, n)

	// An unchanged entry stays, whoever wrote it; none replaced is nothing.
	if err := RemoveReplaced(ctx, b, alice, old.Indexed(), old.Indexed(), 3); err != nil || !exists(t, b, old) {
		t.Fatalf("unchanged: %v", err)
	}
	if err := RemoveReplaced(ctx, b, alice, Indexed{}, cur.Indexed(), 3); err != nil || len(keys(t, b)) != 2 {
		t.Fatalf("none replaced: %v", err)
	}
	// R3: not an entry of a newer owner.
	if err := RemoveReplaced(ctx, b, alice, cur.Indexed(), Indexed{}, 2); !errors.Is(err, ErrNewerGeneration) || !exists(t, b, cur) {
		t.Fatalf("newer: %v", err)
	}
	// The replaced entry goes; gone already is no error.
	for range 2 {
		if err := RemoveReplaced(ctx, b, alice, old.Indexed(), cur.Indexed(), 3); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys(t, b); !slices.Equal(got, []string{cur.String()}) {
		t.Fatalf("bucket holds %q", got)
	}
}

func TestRemoveStaleNeedsAFence(t *testing.T) {
	b, n := view(), counter()
	stale := list(t, b, alice, 1000, 1, n)
	s := Stale{Actor: alice, At: 1000, Gen: 2, Fenced: true}
	if _, err := RemoveStale(ctx, b, s); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("not replicated: %v", err)
	}
	s.Replicated, s.Fenced = true, false
	if _, err := RemoveStale(ctx, b, s); !errors.Is(err, ErrNotFenced) {
		t.Fatalf("unfenced: %v", err)
	}
	s.BucketHadNothing = true
	if _, err := RemoveStale(ctx, b, s); !errors.Is(err, ErrBucketHadNothing) {
		t.Fatalf("unfenced, nothing in the bucket: %v", err)
	}
	if !exists(t, b, stale) {
		t.Fatal("an unfenced owner removed an entry")
	}
	// Once it uploaded under its hold, it may, whatever the bucket had.
	s.Fenced = true
	r, err := RemoveStale(ctx, b, s)
	if err != nil || len(r.Removed) != 1 || exists(t, b, stale) {
		t.Fatalf("fenced: %+v, %v", r, err)
	}
}

func TestRemoveStaleSparesTheNamedAndTheNewer(t *testing.T) {
	b, n := view(), counter()
	bob := history.Actor{Tenant: "acme", Class: "queue", Name: "bob"}
	older := list(t, b, alice, 1000, 1, n)
	own := list(t, b, alice, 1000, 4, n)
	named := list(t, b, alice, 1000, 3, n)
	newer := list(t, b, alice, 1000, 5, n)
	later := list(t, b, alice, 2000, 1, n)                                  // another time
	other := list(t, b, bob, 1000, 1, n)                                    // another actor
	aliceb := history.Actor{Tenant: "acme", Class: "queue", Name: "aliceb"} // a name alice prefixes
	prefixed := list(t, b, aliceb, 1000, 1, n)
	stray := "alarms/acme/000000000001000/queue.t/alice/not-a-tag"
	if _, err := b.Put(ctx, stray, strings.NewReader(""), 0, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	r, err := RemoveStale(ctx, b, Stale{Actor: alice, At: 1000, Named: named.Indexed(), Gen: 4, Fenced: true, Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Removed, []Key{older, own}) || !slices.Equal(r.Spared, []Key{named}) ||
		!slices.Equal(r.Newer, []Key{newer}) || !slices.Equal(r.Unknown, []string{stray}) {
		t.Fatalf("removal %+v", r)
	}
	want := []string{named.String(), newer.String(), later.String(), other.String(), prefixed.String(), stray}
	slices.Sort(want)
	if got := keys(t, b); !slices.Equal(got, want) {
		t.Fatalf("bucket holds %q\nwant %q", got, want)
	}
	// An actor with no state names nothing: everything at the time of its
	// generation or below goes.
	r, err = RemoveStale(ctx, b, Stale{Actor: alice, At: 1000, Gen: 9, Fenced: true, Replicated: true})
	if err != nil || len(r.Removed) != 2 || len(r.Spared) != 0 {
		t.Fatalf("no state: %+v, %v", r, err)
	}
}

// lateDeletes holds the deletes sent while holding: each times out at its
// sender and lands only when told, after whatever happened meanwhile.
type lateDeletes struct {
	bucket.Bucket
	mu      sync.Mutex
	holding bool
	held    []string
	// before runs just before a delete goes through (or is held).
	before func(key string)
}

func (l *lateDeletes) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if l.before != nil {
		l.before(key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holding {
		l.held = append(l.held, key)
		return fmt.Errorf("no answer: %w", bucket.ErrTransient)
	}
	return l.Bucket.Delete(ctx, key, cond)
}

func (l *lateDeletes) land(t *testing.T) {
	l.mu.Lock()
	held := l.held
	l.held, l.holding = nil, false
	l.mu.Unlock()
	for _, k := range held {
		if err := l.Bucket.Delete(ctx, k, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			t.Fatal(err)
		}
	}
}

// R1 with a delete that lands late: an owner moves its alarm away and
// back; the delete of the first entry, sent after the first move, lands
// after the entry of the move back. That entry is a fresh key, so it
// survives, and the database's named entry exists throughout.
func TestALateDeleteAfterAnOwnersOwnRescheduleRemovesNothingNamed(t *testing.T) {
	l := &lateDeletes{Bucket: view()}
	n := counter()
	const gen = 3
	named := list(t, l, alice, 1000, gen, n).Indexed() // the committed alarm, replicated

	// Event 1 moves it to 2000: listed before, removed after replicating;
	// the delete gets no answer and stays in flight.
	next := list(t, l, alice, 2000, gen, n).Indexed()
	l.holding = true
	if err := RemoveReplaced(ctx, l, alice, named, next, gen); !errors.Is(err, bucket.ErrTransient) {
		t.Fatalf("held delete: %v", err)
	}
	named = next
	// Event 2 moves it back to 1000, under the same generation.
	back := list(t, l, alice, 1000, gen, n)
	l.holding = false
	if err := RemoveReplaced(ctx, l, alice, named, back.Indexed(), gen); err != nil {
		t.Fatal(err)
	}
	named = back.Indexed()
	l.land(t) // the first delete lands now

	k, _ := named.Key(alice)
	if !exists(t, l, k) {
		t.Fatalf("the named entry %s is gone", k)
	}
	if got := keys(t, l); !slices.Equal(got, []string{k.String()}) {
		t.Fatalf("bucket holds %q", got)
	}
}

// The unsafe variant R1 rules out: the same key written again (here a
// nonce source stuck on one value). List refuses it while the first entry
// is there, rather than writing the key the late delete will remove.
func TestR1RefusesTheKeyALateDeleteWouldRemove(t *testing.T) {
	l := &lateDeletes{Bucket: view()}
	stuck := NonceFunc(func() uint64 { return 1 })
	first := list(t, l, alice, 1000, 3, stuck).Indexed()
	next := list(t, l, alice, 2000, 3, counter()).Indexed()
	l.holding = true
	_ = RemoveReplaced(ctx, l, alice, first, next, 3)
	if k, err := List(ctx, l, alice, 1000, 3, stuck); !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("List wrote %v (%v): the late delete would remove it", k, err)
	}
}

// R3 with a newer owner: owner A (generation 1) cleans a stale time while
// B (generation 2), which took the actor over when A's lease ran out,
// lists its alarm at that very time. Whether B's entry is written before
// A's listing (R3 spares it) or between A's listing and its delete landing
// (R1: A deletes only the keys it listed), it survives.
func TestR3ANewerOwnersEntrySurvivesAStaleCleanup(t *testing.T) {
	for _, when := range []string{"before the listing", "before the delete lands"} {
		t.Run(when, func(t *testing.T) {
			l := &lateDeletes{Bucket: view()}
			n := counter()
			old := list(t, l, alice, 1000, 1, n) // A's earlier entry at 1000
			aNamed := list(t, l, alice, 5000, 1, n)
			var bEntry Key
			bLists := func() { bEntry = list(t, l, alice, 1000, 2, n) }
			if when == "before the listing" {
				bLists()
			} else {
				l.holding = true
				l.before = func(string) {
					if bEntry.Tag.IsZero() {
						bLists()
					}
				}
			}
			r, err := RemoveStale(ctx, l, Stale{Actor: alice, At: 1000, Named: aNamed.Indexed(), Gen: 1, Fenced: true, Replicated: true})
			if when == "before the listing" {
				if err != nil || !slices.Equal(r.Newer, []Key{bEntry}) || !slices.Equal(r.Removed, []Key{old}) {
					t.Fatalf("removal %+v, %v", r, err)
				}
			} else if !errors.Is(err, bucket.ErrTransient) {
				t.Fatalf("held delete: %v", err)
			}
			l.land(t)
			if !exists(t, l, bEntry) {
				t.Fatalf("B's entry %s is gone", bEntry)
			}
			if exists(t, l, old) {
				t.Fatalf("the stale entry %s stayed", old)
			}
		})
	}
}

// readAll reads an object whole.
func readAll(t *testing.T, b bucket.Bucket, key string) string {
	t.Helper()
	obj, err := b.Get(ctx, key, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	body, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
