package alarmindex

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

func TestHorizon(t *testing.T) {
	now := time.UnixMilli(100_000)
	if got := Horizon(now, 15*time.Second); got != 85_000 {
		t.Fatalf("horizon %d", got)
	}
}

// smallPages is a store whose pages hold at most n keys, whatever the
// limit asked.
type smallPages struct {
	bucket.Bucket
	n int
}

func (s smallPages) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if opts.Limit == 0 || opts.Limit > s.n {
		opts.Limit = s.n
	}
	return s.Bucket.List(ctx, prefix, opts)
}

// stores are the listings the sweep must work on: byte order, a store
// walking directories (d/x before d-/x), and either with small pages.
func stores() map[string]func() bucket.Bucket {
	under := func(f buckettest.Flaws) bucket.Bucket {
		return bucket.Under(buckettest.NewMemory(f), "state/acme/shop/")
	}
	return map[string]func() bucket.Bucket{
		"bytes":             func() bucket.Bucket { return under(buckettest.Flaws{}) },
		"directories":       func() bucket.Bucket { return under(buckettest.Flaws{ListByDirectory: true}) },
		"bytes, pages of 2": func() bucket.Bucket { return smallPages{under(buckettest.Flaws{}), 2} },
		"directories, pages of 3": func() bucket.Bucket {
			return smallPages{under(buckettest.Flaws{ListByDirectory: true}), 3}
		},
	}
}

// names whose segments first differ at a "/" (a, a-, a-b), which a store
// walking directories lists out of byte order.
var sweepNames = []string{"a", "a-", "a-b", "a.b", "b", "a-b-c", strings.Repeat("ü", 100)}

// fill lists each name's alarm at each time, under generation 1.
func fill(t *testing.T, b bucket.Bucket, times []int64) []Key {
	t.Helper()
	n := counter()
	var all []Key
	for _, at := range times {
		for _, name := range sweepNames {
			all = append(all, list(t, b, history.Actor{Tenant: "acme", Class: "queue", Name: name}, at, 1, n))
		}
	}
	return all
}

func TestReadOverdueStopsAtTheFirstEntryNotOverdue(t *testing.T) {
	for name, store := range stores() {
		t.Run(name, func(t *testing.T) {
			b := store()
			all := fill(t, b, []int64{3000, 1000, 2000, 4000})
			// Another tenant's index is not read.
			list(t, b, history.Actor{Tenant: "acmf", Class: "queue", Name: "a"}, 1000, 1, counter())
			r, err := ReadOverdue(ctx, b, "acme", 2000, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []Key
			for _, k := range all {
				if k.At <= 2000 {
					want = append(want, k)
				}
			}
			if r.Next != "" || !sameKeys(r.Keys, want) {
				t.Fatalf("read %v (next %q)\nwant %v", r.Keys, r.Next, want)
			}
			for i := 1; i < len(r.Keys); i++ {
				if r.Keys[i].At < r.Keys[i-1].At {
					t.Fatalf("%v before %v", r.Keys[i-1], r.Keys[i])
				}
			}
			// It stopped at the first entry at 3000, reading one key past
			// the overdue ones.
			if r.Listed != len(want)+1 {
				t.Fatalf("listed %d keys, want %d", r.Listed, len(want)+1)
			}
		})
	}
}

func sameKeys(a, b []Key) bool {
	s := func(ks []Key) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.String())
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(s(a), s(b))
}

// A sweep reads at most max keys and the next resumes after them, so every
// overdue entry is read once over the sweeps, then the walk starts over.
func TestReadOverdueResumesAfterTheLastKey(t *testing.T) {
	for name, store := range stores() {
		t.Run(name, func(t *testing.T) {
			b := store()
			all := fill(t, b, []int64{1000, 2000, 3000})
			stray := "alarms/acme/000000000002000/queue.t/zz/x" // not an entry: read, skipped
			if _, err := b.Put(ctx, stray, strings.NewReader(""), 0, bucket.Condition{}); err != nil {
				t.Fatal(err)
			}
			var got []Key
			var unknown []string
			cursor := ""
			for sweep := 0; ; sweep++ {
				r, err := ReadOverdue(ctx, b, "acme", 5000, cursor, 4)
				if err != nil {
					t.Fatal(err)
				}
				if r.Listed > 4 {
					t.Fatalf("sweep %d listed %d keys", sweep, r.Listed)
				}
				got, unknown = append(got, r.Keys...), append(unknown, r.Unknown...)
				if cursor = r.Next; cursor == "" {
					break
				}
				if sweep > len(all) {
					t.Fatal("the sweeps never reached the end")
				}
			}
			if !sameKeys(got, all) || len(got) != len(all) || !slices.Equal(unknown, []string{stray}) {
				t.Fatalf("read %d keys over the sweeps (unknown %q), want each of %d once", len(got), unknown, len(all))
			}
			// Next time from the start.
			r, err := ReadOverdue(ctx, b, "acme", 1000, cursor, 4)
			if err != nil || len(r.Keys) == 0 || r.Keys[0].At != 1000 {
				t.Fatalf("after the end: %+v, %v", r, err)
			}
		})
	}
}

func TestReadOverdueCapsAtMaxRead(t *testing.T) {
	b := smallPages{view(), 1000}
	n := counter()
	for i := range MaxRead + 10 {
		list(t, b, history.Actor{Tenant: "acme", Class: "queue", Name: fmt.Sprint(i)}, int64(i), 1, n)
	}
	r, err := ReadOverdue(ctx, b, "acme", MaxRead+10, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Listed != MaxRead || len(r.Keys) != MaxRead || r.Next == "" {
		t.Fatalf("listed %d, read %d, next %q", r.Listed, len(r.Keys), r.Next)
	}
	r, err = ReadOverdue(ctx, b, "acme", MaxRead+10, r.Next, 0)
	if err != nil || len(r.Keys) != 10 || r.Next != "" || r.Keys[0].At != MaxRead {
		t.Fatalf("resumed: %d keys from %v, next %q, %v", len(r.Keys), r.Keys[0], r.Next, err)
	}
}

// keysAt makes n entries of distinct actors at at (no bucket needed to
// plan).
func keysAt(prefix string, n int, at int64) []Key {
	var out []Key
	for i := range n {
		out = append(out, Key{Tenant: "acme", Class: "queue", Name: fmt.Sprintf("%s%d", prefix, i), At: at, Tag: Tag{Gen: 1, Nonce: uint64(i)}})
	}
	return out
}

const margin = 15 * time.Second

var (
	now       = time.UnixMilli(1_000_000)
	overdue   = Horizon(now, margin)       // overdue, not anyone's yet
	anyoneOld = Horizon(now, 3*margin) - 1 // anyone's
)

func sweep(self string, shards ...string) Sweep {
	return Sweep{Now: now, Margin: margin, Self: self, Shards: shards, Rand: rand.New(rand.NewPCG(1, 2))}
}

func delivered(ds []Delivery) (own, anyone []Key) {
	for _, d := range ds {
		if d.Anyone {
			anyone = append(anyone, d.Key)
		} else {
			own = append(own, d.Key)
		}
	}
	return own, anyone
}

// The live nodes share the overdue entries: each goes to exactly one.
func TestPlanShardsBetweenTheLiveNodes(t *testing.T) {
	ks := keysAt("x", 150, overdue)
	nodes := []string{"n1", "n2", "n3"}
	count := map[string]int{}
	for _, self := range nodes {
		own, anyone := delivered(Plan(ks, sweep(self, "n3", "n1", "n2", "n1")))
		if len(anyone) != 0 {
			t.Fatalf("%s delivered %d entries not yet anyone's", self, len(anyone))
		}
		if len(own) < 25 {
			t.Fatalf("%s got %d of 150", self, len(own))
		}
		for _, k := range own {
			count[k.Address()]++
		}
	}
	for _, k := range ks {
		if count[k.Address()] != 1 {
			t.Fatalf("%s delivered by %d nodes", k.Address(), count[k.Address()])
		}
	}
	// No shard list: everything is this node's.
	if own, _ := delivered(Plan(ks, sweep("n1"))); len(own) != len(ks) {
		t.Fatalf("alone: %d of %d", len(own), len(ks))
	}
}

// A node leaving the shard list moves only its own share.
func TestShardMovesOnlyTheLeaversShare(t *testing.T) {
	three, two := []string{"a", "b", "c"}, []string{"a", "b"}
	moved := 0
	for i := range 3000 {
		addr := fmt.Sprintf("acme/queue/%d", i)
		before, after := Shard(addr, three), Shard(addr, two)
		if before != "c" && before != after {
			t.Fatalf("%s moved from %s to %s", addr, before, after)
		}
		if before == "c" {
			moved++
		}
	}
	if moved < 800 || moved > 1200 {
		t.Fatalf("c held %d of 3000", moved)
	}
	if Shard("x", nil) != "" {
		t.Fatal("a shard with no nodes")
	}
}

// Three margins overdue, another node's entries are anyone's.
func TestPlanAnyonesEntries(t *testing.T) {
	ks := append(keysAt("young", 40, overdue), keysAt("old", 40, anyoneOld)...)
	// On a node with no share at all (it drains), only anyone's entries.
	own, anyone := delivered(Plan(ks, sweep("drainer", "n1", "n2")))
	if len(own) != 0 || len(anyone) != 40 {
		t.Fatalf("own %d, anyone's %d", len(own), len(anyone))
	}
	for _, k := range anyone {
		if k.At != anyoneOld {
			t.Fatalf("%v delivered as anyone's", k)
		}
	}
}

func TestPlanCapsAndSplits(t *testing.T) {
	s := sweep("n1", "n1", "n2")
	// 300 entries of n1's shard, overdue; 100 of n2's, anyone's.
	var mine, theirs []Key
	for i := 0; len(mine) < 300 || len(theirs) < 100; i++ {
		k := keysAt(fmt.Sprint(i, "-"), 1, overdue)[0]
		if Shard(k.Address(), s.Shards) == "n1" {
			if len(mine) < 300 {
				mine = append(mine, k)
			}
		} else if len(theirs) < 100 {
			k.At = anyoneOld
			theirs = append(theirs, k)
		}
	}
	ks := append(slices.Clone(mine), theirs...)

	// Own entries first, in due order; anyone's keep an eighth.
	gotOwn, gotAnyone := delivered(Plan(ks, s))
	if len(gotOwn)+len(gotAnyone) != MaxDeliver || len(gotAnyone) != MaxDeliver/AnyoneShare ||
		!slices.Equal(gotOwn, mine[:MaxDeliver-MaxDeliver/AnyoneShare]) {
		t.Fatalf("own %d (in order: %v), anyone's %d", len(gotOwn), slices.Equal(gotOwn, mine[:len(gotOwn)]), len(gotAnyone))
	}
	// Anyone's take what own entries leave.
	few := mine[:10]
	gotOwn, gotAnyone = delivered(Plan(append(slices.Clone(few), theirs...), s))
	if len(gotOwn) != 10 || len(gotAnyone) != min(len(theirs), MaxDeliver-10) {
		t.Fatalf("own %d, anyone's %d of %d", len(gotOwn), len(gotAnyone), len(theirs))
	}
	// A smaller cap, split the same way.
	s.Max = 16
	gotOwn, gotAnyone = delivered(Plan(ks, s))
	if len(gotOwn) != 14 || len(gotAnyone) != 2 {
		t.Fatalf("cap 16: own %d, anyone's %d", len(gotOwn), len(gotAnyone))
	}
}

// Anyone's entries come from a seeded rotation: two nodes with different
// seeds mostly pick different ones; the same seed, the same.
func TestPlanRotatesAnyonesEntries(t *testing.T) {
	old := keysAt("old", 1000, anyoneOld)
	pick := func(seed uint64) []Key {
		s := sweep("n9", "n1", "n2")
		s.Max = 64
		s.Rand = rand.New(rand.NewPCG(seed, seed))
		_, anyone := delivered(Plan(old, s))
		if len(anyone) != 64 {
			t.Fatalf("picked %d", len(anyone))
		}
		return anyone
	}
	if !slices.Equal(pick(1), pick(1)) {
		t.Fatal("the same seed picked differently")
	}
	if slices.Equal(pick(1), pick(2)) {
		t.Fatal("two seeds picked the same entries")
	}
}

// Busy actors (in flight or retrying here) count for nothing; an actor is
// delivered once, at its earliest time read.
func TestPlanSkipsBusyActorsAndRepeats(t *testing.T) {
	ks := keysAt("x", 10, overdue-10)
	later := ks[0]
	later.At, later.Tag = overdue, Tag{Gen: 2, Nonce: 99}
	ks = append(ks, later)
	s := sweep("n1")
	s.Max = 5
	s.Busy = func(k Key) bool { return k.Name == "x1" || k.Name == "x2" }
	got := Plan(ks, s)
	want := []Delivery{{Key: ks[0]}, {Key: ks[3]}, {Key: ks[4]}, {Key: ks[5]}, {Key: ks[6]}}
	if !slices.Equal(got, want) {
		t.Fatalf("planned %v\nwant %v", got, want)
	}
	s.Max = 0
	if got := Plan(ks, s); len(got) != 8 || slices.Contains(got, Delivery{Key: later}) {
		t.Fatalf("planned %v: x0's later entry, or not 8", got)
	}
}
