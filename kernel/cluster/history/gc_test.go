package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// timedListing lists keys with the times they landed.
func timedListing(t *testing.T, landed map[Key]time.Time, unknown ...string) Listing {
	t.Helper()
	var entries []bucket.Entry
	for k, at := range landed {
		entries = append(entries, bucket.Entry{Key: testPrefix + k.Rel(), ModTime: at})
	}
	for _, u := range unknown {
		entries = append(entries, bucket.Entry{Key: testPrefix + u, ModTime: t0})
	}
	slices.SortFunc(entries, func(a, b bucket.Entry) int { return strings.Compare(a.Key, b.Key) })
	l, err := ParseListing(testPrefix, entries)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Unknown) != len(unknown) {
		t.Fatalf("unknown keys %v", l.Unknown)
	}
	return l
}

func keysOf(objs []Object) []Key {
	out := make([]Key, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Key)
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Rel(), b.Rel()) })
	return out
}

func at(keys ...Key) map[Key]time.Time {
	m := map[Key]time.Time{}
	for _, k := range keys {
		m[k] = t0
	}
	return m
}

func TestCollectableKeepsTheSnapshotTheSegmentAtItAndWhatFollows(t *testing.T) {
	// generation 1 wrote 1..4 and a snapshot at 2; generation 2 took over
	// at 3, generation 1's 4 landed late; generation 3 took over at 5 and
	// snapshots at 6; generation 2's 6 lands late.
	landed := at(seg(1, 1, 0), seg(2, 1, 1), snap(2, 1), seg(3, 1, 1), seg(4, 1, 1),
		seg(4, 2, 1), seg(5, 2, 2), seg(6, 3, 2), snap(6, 3), seg(7, 3, 3), seg(8, 3, 3), seg(6, 2, 2))
	l := timedListing(t, landed, "wal/junk.tmp")
	got, err := Collectable(l, 3, snap(6, 3), 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Key{snap(2, 1), seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1), seg(4, 1, 1), seg(4, 2, 1), seg(5, 2, 2), seg(6, 2, 2)}
	slices.SortFunc(want, func(a, b Key) int { return strings.Compare(a.Rel(), b.Rel()) })
	if !sameKeys(keysOf(got), want) {
		t.Fatalf("collectable %v, want %v", keysOf(got), want)
	}
	// What stays restores to the same head from the snapshot.
	for _, o := range got {
		delete(landed, o.Key)
	}
	p, err := PlanRestore(timedListing(t, landed))
	if err != nil {
		t.Fatal(err)
	}
	if !sameKeys(planKeys(p), []Key{snap(6, 3), seg(7, 3, 3), seg(8, 3, 3)}) {
		t.Fatalf("plan after collection %v", planKeys(p))
	}
	// A late upload of an earlier generation cannot become the head: the
	// segment at the snapshot outranks it.
	landed[seg(9, 2, 2)] = t0
	if p2, err := PlanRestore(timedListing(t, landed)); err != nil || p2.Head != p.Head {
		t.Fatalf("after a late upload: plan %v head %v, %v", planKeys(p2), p2.Head, err)
	}
}

func TestCollectableRetention(t *testing.T) {
	landed := map[Key]time.Time{
		seg(1, 1, 0): t0,
		seg(2, 1, 1): t0.Add(30 * time.Minute),
		seg(3, 2, 1): t0.Add(50 * time.Minute),
		snap(3, 2):   t0.Add(50 * time.Minute),
	}
	l := timedListing(t, landed)
	now := t0.Add(time.Hour + 10*time.Minute)
	got, err := Collectable(l, 2, snap(3, 2), DefaultRetention, now)
	if err != nil {
		t.Fatal(err)
	}
	if !sameKeys(keysOf(got), []Key{seg(1, 1, 0)}) {
		t.Fatalf("collectable after 70 minutes: %v, want the one older than an hour", keysOf(got))
	}
	if got, _ := Collectable(l, 2, snap(3, 2), DefaultRetention, now.Add(20*time.Minute)); len(got) != 2 {
		t.Fatalf("collectable after 90 minutes: %v", keysOf(got))
	}
	// No window: everything the rule allows, even stamped ahead of now.
	if got, _ := Collectable(l, 2, snap(3, 2), 0, t0); len(got) != 2 {
		t.Fatalf("collectable without a window: %v", keysOf(got))
	}
}

func TestCollectableGuards(t *testing.T) {
	landed := at(seg(1, 1, 0), seg(2, 1, 1), snap(2, 1), seg(3, 2, 1), snap(3, 2))
	l := timedListing(t, landed)
	for _, c := range []struct {
		name string
		h    uint64
		s    Key
		what string
	}{
		{"a snapshot of another generation", 2, snap(2, 1), "holder's own generation"},
		{"a segment", 2, seg(3, 2, 1), "only after a snapshot"},
		{"a snapshot not listed", 2, snap(4, 2), "not in the listing"},
		{"a newer generation listed", 1, snap(2, 1), "not the newest"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Collectable(l, c.h, c.s, 0, t0)
			if err == nil || !strings.Contains(err.Error(), c.what) || got != nil {
				t.Fatalf("collectable %v, %v; want nothing and an error saying %q", keysOf(got), err, c.what)
			}
		})
	}
	// A snapshot with no segment of its own under it (a generation that
	// snapshotted at the head it restored, as after 64 restored segments).
	delete(landed, seg(3, 2, 1))
	landed[snap(2, 2)] = t0
	if got, err := Collectable(timedListing(t, landed), 2, snap(2, 2), 0, t0); err == nil || got != nil {
		t.Fatalf("collectable %v without the segment at the snapshot", keysOf(got))
	}
}

// Book ADR 0012's interleaving for its condition 2: m's upload of (x, m) is
// held; j restores to (x-1, m), uploads (x, j) (also held), and its hold
// runs out; (x, m) lands; h restores to (x, m) and snapshots there without
// writing. Collecting after that snapshot would delete (x-1, m), the parent
// of j's upload, which is the head once it lands.
func TestCollectableRefusesASnapshotAtAnotherGenerationsHead(t *testing.T) {
	const m, j, h, x = 1, 2, 3, 3
	landed := at(seg(1, m, 0), seg(2, m, m))
	landed[seg(x, m, m)] = t0 // lands late, before h lists
	p, err := PlanRestore(timedListing(t, landed))
	if err != nil || p.Head != (Pos{x, m}) {
		t.Fatalf("h restores %v, %v", p.Head, err)
	}
	landed[snap(x, m)] = t0 // h's snapshot at the head it restored
	if got, err := Collectable(timedListing(t, landed), h, snap(x, m), 0, t0); err == nil {
		t.Fatalf("collected %v after a snapshot at generation %d's head", keysOf(got), m)
	}
	// What the guard prevents: collecting by position alone loses j's
	// parent when j's upload lands.
	for k := range landed {
		if k.TXID < x {
			delete(landed, k)
		}
	}
	landed[seg(x, j, m)] = t0
	if _, err := PlanRestore(timedListing(t, landed)); err == nil {
		t.Fatal("the interleaving does not break a restore without the guard: the test proves nothing")
	}
}

// history is a random history of an actor, written as owners would: each
// generation lists what has landed, restores, writes segments on the head
// and sometimes snapshots; an upload may be held and land later (its hold
// then ends: an owner awaits each upload before its next event).
type history struct {
	rnd    *rand.Rand
	now    time.Time
	landed map[Key]time.Time
	held   []Key
}

func (hs *history) upload(k Key, hold bool) {
	if hold {
		hs.held = append(hs.held, k)
		return
	}
	hs.landed[k] = hs.now
}

// landSome lets some held uploads land (all of them with all).
func (hs *history) landSome(t *testing.T, all bool) {
	var still []Key
	for _, k := range hs.held {
		if all || hs.rnd.IntN(3) == 0 {
			hs.landed[k] = hs.now
		} else {
			still = append(still, k)
		}
	}
	hs.held = still
}

func (hs *history) restore(t *testing.T) Plan {
	t.Helper()
	p, err := PlanRestore(timedListing(t, hs.landed))
	if err != nil {
		t.Fatalf("restore: %v (landed %v)", err, keysOf(objectsOf(hs.landed)))
	}
	return p
}

func objectsOf(m map[Key]time.Time) []Object {
	var out []Object
	for k := range m {
		out = append(out, Object{Key: k})
	}
	return out
}

// write is one hold of generation g: it restores and writes up to n
// segments (the last may be held, which ends the hold), with snapshots now
// and then; final writes at least one segment, lands everything and
// returns the snapshot it takes at its last segment.
func (hs *history) write(t *testing.T, g uint64, n int, final bool) Key {
	p := hs.restore(t)
	head := p.Head
	if !p.Empty() && hs.rnd.IntN(6) == 0 {
		hs.upload(snap(head.TXID, head.Gen), hs.rnd.IntN(4) == 0) // a snapshot right after a restore
	}
	if final && n == 0 {
		n = 1
	}
	for i := 0; i < n; i++ {
		hs.now = hs.now.Add(time.Duration(1+hs.rnd.IntN(600)) * time.Second)
		k := seg(head.TXID+1, g, head.Gen)
		held := !final && hs.rnd.IntN(5) == 0
		hs.upload(k, held)
		if held {
			return Key{}
		}
		head = k.Pos()
		if final && i == n-1 {
			s := snap(head.TXID, g)
			hs.upload(s, false)
			return s
		}
		if hs.rnd.IntN(8) == 0 {
			hs.upload(snap(head.TXID, g), hs.rnd.IntN(4) == 0)
		}
	}
	return Key{}
}

// TestCollectableProperty: over random histories with uploads landing
// late, collecting by the rule after the newest holder's own snapshot never
// removes what a restore of the current head needs, whatever lands after
// it; with no window it removes every earlier generation and everything
// below the snapshot; with a window, exactly what is also old enough.
func TestCollectableProperty(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	collected := 0
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			hs := &history{rnd: rand.New(rand.NewPCG(uint64(seed), 14)), now: t0, landed: map[Key]time.Time{}}
			gens := 1 + hs.rnd.IntN(6)
			for g := 1; g <= gens; g++ {
				hs.landSome(t, false)
				hs.write(t, uint64(g), hs.rnd.IntN(6), false)
			}
			h := uint64(gens + 1)
			hs.landSome(t, false)
			s := hs.write(t, h, hs.rnd.IntN(6), true)
			hs.landSome(t, false) // earlier holds' uploads landing after h restored
			before := hs.restore(t)

			retention := time.Duration(0)
			if hs.rnd.IntN(2) == 0 {
				retention = time.Duration(hs.rnd.IntN(3600)) * time.Second
			}
			hs.now = hs.now.Add(time.Duration(hs.rnd.IntN(1800)) * time.Second)
			l := timedListing(t, hs.landed)
			got, err := Collectable(l, h, s, retention, hs.now)
			if err != nil {
				t.Fatal(err)
			}
			gone := map[Key]bool{}
			for _, o := range got {
				gone[o.Key] = true
				if retention > 0 && hs.now.Sub(o.Entry.ModTime) < retention {
					t.Fatalf("collected %s, younger than the window", o.Key)
				}
			}
			for _, o := range l.Objects {
				k := o.Key
				ruled := (k.TXID < s.TXID || k.Gen < h) && k != s && !(k.Kind == Segment && k.Pos() == s.Pos())
				old := retention == 0 || hs.now.Sub(o.Entry.ModTime) >= retention
				if gone[k] != (ruled && old) {
					t.Fatalf("%s collected %v, want %v (rule %v, old enough %v)", k, gone[k], ruled && old, ruled, old)
				}
			}
			collected += len(got)
			for k := range gone {
				delete(hs.landed, k)
			}

			after := hs.restore(t)
			if after.Head != before.Head || after.Snapshot == nil || after.Snapshot.Key.Pos() != s.Pos() {
				t.Fatalf("after collection the plan is %v (head %v), before %v", planKeys(after), after.Head, planKeys(before))
			}
			var tail []Key
			for _, o := range before.Segments {
				if o.Key.TXID > s.TXID {
					tail = append(tail, o.Key)
				}
			}
			if !sameKeys(planKeys(after)[1:], tail) {
				t.Fatalf("after collection the plan replays %v, before %v", planKeys(after)[1:], tail)
			}
			// Whatever was held lands now: the head stays h's.
			hs.landSome(t, true)
			if late := hs.restore(t); late.Head != before.Head {
				t.Fatalf("a late upload moved the head from %v to %v", before.Head, late.Head)
			}
		})
	}
	if collected == 0 {
		t.Fatal("nothing was ever collected: the property proves nothing")
	}
	t.Logf("%d seeds, %d objects collected", seeds, collected)
}

// A delete (book ADR 0028 §1, book ADR 0012 "Deleted actors"): the holder ships a
// reset segment on its head and a snapshot at it, then erases without the
// window: two objects remain, and they restore.
func TestCollectableErasesADeletedActor(t *testing.T) {
	landed := map[Key]time.Time{}
	for txid := uint64(1); txid <= 70; txid++ {
		g := uint64(1 + txid/30)
		parent := g
		if txid == 1 {
			parent = 0
		} else if (txid-1)/30+1 != g {
			parent = g - 1
		}
		landed[seg(txid, g, parent)] = t0
	}
	landed[snap(64, 3)] = t0
	landed[seg(50, 1, 1)] = t0 // a late upload of an earlier holder
	const h = 4
	reset, s := seg(71, h, 3), snap(71, h)
	landed[reset], landed[s] = t0.Add(time.Minute), t0.Add(time.Minute)
	got, err := Collectable(timedListing(t, landed), h, s, 0, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range got {
		delete(landed, o.Key)
	}
	if len(landed) != 2 || landed[reset].IsZero() || landed[s].IsZero() {
		t.Fatalf("after the erasure: %v", keysOf(objectsOf(landed)))
	}
	if p, err := PlanRestore(timedListing(t, landed)); err != nil || !sameKeys(planKeys(p), []Key{s}) {
		t.Fatalf("the deleted actor restores %v, %v", planKeys(p), err)
	}
}
