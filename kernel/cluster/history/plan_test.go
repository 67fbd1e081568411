package history

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/superfly/ltx"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

const testPrefix = "actors/t/c/n/"

// seg and snap write keys in the order txid, generation, parent.
func seg(txid, gen, parent uint64) Key {
	return Key{Kind: Segment, TXID: txid, Gen: gen, Parent: parent}
}

func snap(txid, gen uint64) Key { return Key{Kind: Snapshot, TXID: txid, Gen: gen} }

func listingOf(t *testing.T, keys ...Key) Listing {
	t.Helper()
	var entries []bucket.Entry
	for _, k := range keys {
		entries = append(entries, bucket.Entry{Key: testPrefix + k.Rel()})
	}
	l, err := ParseListing(testPrefix, entries)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Unknown) > 0 {
		t.Fatalf("unknown keys %v", l.Unknown)
	}
	return l
}

func planKeys(p Plan) []Key {
	var out []Key
	for _, o := range p.Objects() {
		out = append(out, o.Key)
	}
	return out
}

func sameKeys(a, b []Key) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestPlanRestore(t *testing.T) {
	for _, c := range []struct {
		name string
		keys []Key
		head Pos
		want []Key
	}{
		{"nothing", nil, Pos{}, nil},
		{"one generation", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1)}, Pos{3, 1}, []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1)}},
		{"from a snapshot", []Key{seg(1, 1, 0), seg(2, 1, 1), snap(2, 1), seg(3, 1, 1), seg(4, 1, 1)}, Pos{4, 1}, []Key{snap(2, 1), seg(3, 1, 1), seg(4, 1, 1)}},
		{"a snapshot at the head", []Key{seg(1, 1, 0), seg(2, 1, 1), snap(2, 1)}, Pos{2, 1}, []Key{snap(2, 1)}},
		{"the first snapshot on the way back", []Key{snap(1, 1), seg(1, 1, 0), seg(2, 1, 1), snap(2, 1), seg(3, 1, 1)}, Pos{3, 1}, []Key{snap(2, 1), seg(3, 1, 1)}},
		// generation 2 took over at txid 3 of generation 1; a late upload of
		// generation 1 at txid 4 is on no chain anyone built on.
		{"a takeover and a late upload", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1), seg(4, 1, 1), seg(4, 2, 1), seg(5, 2, 2)}, Pos{5, 2}, []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1), seg(4, 2, 1), seg(5, 2, 2)}},
		// the highest generation wins over the longest history
		{"the highest generation is the head", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 1, 1), seg(2, 2, 1)}, Pos{2, 2}, []Key{seg(1, 1, 0), seg(2, 2, 1)}},
		// a snapshot off the chain (generation 2's, at its head that
		// generation 3 did not build on) is not used
		{"a snapshot off the chain", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 2, 1), snap(3, 2), seg(3, 3, 1)}, Pos{3, 3}, []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 3, 1)}},
		{"snapshots alone", []Key{snap(5, 1), snap(3, 2), snap(2, 2)}, Pos{3, 2}, []Key{snap(3, 2)}},
		{"a segment outranks a snapshot", []Key{snap(9, 3), seg(1, 1, 0)}, Pos{1, 1}, []Key{seg(1, 1, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanRestore(listingOf(t, c.keys...))
			if err != nil {
				t.Fatal(err)
			}
			if p.Head != c.head || !sameKeys(planKeys(p), c.want) {
				t.Fatalf("plan head %v %v, want %v %v", p.Head, planKeys(p), c.head, c.want)
			}
			if p.Empty() != (c.want == nil) {
				t.Fatalf("Empty() = %v", p.Empty())
			}
		})
	}
}

func TestPlanRestoreBroken(t *testing.T) {
	for _, c := range []struct {
		name string
		keys []Key
		at   Pos
		what string
	}{
		{"a missing segment", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(4, 1, 1)}, Pos{3, 1}, "parent of segment txid 4"},
		{"a missing parent generation", []Key{seg(1, 1, 0), seg(2, 1, 1), seg(3, 3, 2)}, Pos{2, 2}, "no segment and no snapshot"},
		{"a missing first segment", []Key{seg(2, 1, 1)}, Pos{1, 1}, "no segment"},
		{"two segments at one position", []Key{seg(1, 1, 0), seg(1, 2, 0), seg(2, 2, 1), seg(2, 2, 2), seg(3, 2, 2)}, Pos{2, 2}, "2 segments"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanRestore(listingOf(t, c.keys...))
			var be *BrokenError
			if !errors.As(err, &be) || !errors.Is(err, ErrBroken) {
				t.Fatalf("plan %v, error %v; want a broken chain", planKeys(p), err)
			}
			if be.At != c.at || !strings.Contains(err.Error(), c.what) {
				t.Fatalf("error %v (at %v), want at %v saying %q", err, be.At, c.at, c.what)
			}
		})
	}
}

func sums(minTXID, maxTXID uint64, pre, post ltx.Checksum) Sums {
	return Sums{MinTXID: minTXID, MaxTXID: maxTXID, PreApply: pre, PostApply: post}
}

func TestCheckChain(t *testing.T) {
	const f = ltx.ChecksumFlag
	l := listingOf(t, seg(1, 1, 0), snap(2, 1), seg(2, 1, 1), seg(3, 1, 1), seg(4, 2, 1))
	p, err := PlanRestore(l)
	if err != nil {
		t.Fatal(err)
	}
	good := map[Key]Sums{
		seg(1, 1, 0): sums(1, 1, 0, f|1),
		snap(2, 1):   sums(1, 2, 0, f|2),
		seg(2, 1, 1): sums(2, 2, f|1, f|2),
		seg(3, 1, 1): sums(3, 3, f|2, f|3),
		seg(4, 2, 1): sums(4, 4, f|3, f|4),
	}
	if err := CheckChain(p, good); err != nil {
		t.Fatal(err)
	}
	// From the empty database, the same chain without the snapshot.
	whole := Plan{Head: p.Head, Segments: []Object{{Key: seg(1, 1, 0)}, {Key: seg(2, 1, 1)}, {Key: seg(3, 1, 1)}, {Key: seg(4, 2, 1)}}}
	if err := CheckChain(whole, good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		key  Key
		s    Sums
		what string
	}{
		{"a pre-apply checksum off the chain", seg(4, 2, 1), sums(4, 4, f|7, f|4), "expects checksum 8000000000000007 before it, the segment txid 3 generation 1 on generation 1 leaves 8000000000000003"},
		{"a snapshot not from transaction 1", snap(2, 1), sums(2, 2, 0, f|2), "holds transactions 2 to 2"},
		{"a segment of several transactions", seg(3, 1, 1), sums(2, 3, f|1, f|3), "holds transactions 2 to 3"},
		{"a segment holding another txid", seg(3, 1, 1), sums(4, 4, f|2, f|3), "holds transactions 4 to 4"},
		{"a snapshot with a pre-apply checksum", snap(2, 1), sums(1, 2, f|9, f|2), "expects checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := map[Key]Sums{}
			for k, v := range good {
				bad[k] = v
			}
			bad[c.key] = c.s
			err := CheckChain(p, bad)
			var be *BrokenError
			if !errors.As(err, &be) || be.At != c.key.Pos() || !strings.Contains(err.Error(), c.what) {
				t.Fatalf("error %v, want one at %v saying %q", err, c.key.Pos(), c.what)
			}
		})
	}
	delete(good, seg(3, 1, 1))
	if err := CheckChain(p, good); !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "no header read") {
		t.Fatalf("a missing header: %v", err)
	}
	// The first segment on the empty database must expect nothing before it.
	if err := CheckChain(whole, map[Key]Sums{seg(1, 1, 0): sums(1, 1, f|5, f|1)}); !errors.Is(err, ErrBroken) {
		t.Fatalf("a first segment expecting a checksum: %v", err)
	}
}
