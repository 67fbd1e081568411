package alarmindex

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The sweep (book ADR 0009, point 4): every alarm_sweep each node reads the
// overdue part of its app's index (ReadOverdue) and plans which entries it
// delivers (Plan). Delivery is the node's ordinary alarm event; a time that
// no longer matches the committed alarm is cleaned by RemoveStale.

const (
	// MaxRead bounds the entries one sweep reads; the next resumes after
	// the last, so entries nobody can act on never hold the rest back.
	MaxRead = 2048
	// MaxDeliver bounds the entries one node delivers per sweep.
	MaxDeliver = 256
	// AnyoneShare: anyone's entries keep 1/AnyoneShare of the deliveries.
	AnyoneShare = 8
	// AnyoneMargins: an entry this many margins overdue is anyone's.
	AnyoneMargins = 3
)

// Horizon is the latest due time (ms) a sweep at now reads: a margin (a
// lease period plus grace, nodelease.Settings.Takeover) before now, after
// which the owner, had it lived, would have delivered the alarm itself.
func Horizon(now time.Time, margin time.Duration) int64 { return now.Add(-margin).UnixMilli() }

// Read is what a sweep read of the index.
type Read struct {
	Keys    []Key    // overdue entries, earlier times first
	Unknown []string // keys under the index that are not entries, skipped
	Listed  int      // keys listed, entries or not
	// Next is where the next sweep resumes: "" (from the start) once the
	// walk met an entry not overdue or the end of the index, else the
	// store's position after the last key read.
	Next string
}

// ReadOverdue lists tenant's entries due at or before horizon, after
// cursor ("" or a previous Read's Next), reading at most max keys (0:
// MaxRead) and stopping at the first entry not that overdue. The bucket
// contract orders keys only where they first differ outside a "/": two
// entries of different times first differ at a digit of their due
// segment, so every entry before the first not overdue is overdue, while
// entries of one time may come in any order. For the same reason the
// cursor is the store's own Next, never the last key: a page is asked for
// no more than the keys left to read, so the walk stops at a page's end.
func ReadOverdue(ctx context.Context, b bucket.Lister, tenant string, horizon int64, cursor string, max int) (Read, error) {
	if max <= 0 {
		max = MaxRead
	}
	prefix := TenantPrefix(tenant)
	var r Read
	for {
		page, err := b.List(ctx, prefix, bucket.ListOptions{StartAfter: cursor, Limit: max - r.Listed})
		if err != nil {
			return Read{}, fmt.Errorf("alarmindex: sweeping %s: %w", prefix, err)
		}
		for _, e := range page.Entries {
			r.Listed++
			k, err := ParseKey(e.Key)
			switch {
			case err != nil || k.Tenant != tenant:
				r.Unknown = append(r.Unknown, e.Key)
			case k.At > horizon:
				r.Next = ""
				return r, nil
			default:
				r.Keys = append(r.Keys, k)
			}
		}
		switch {
		case page.Next == "":
			r.Next = ""
			return r, nil
		case r.Listed >= max:
			r.Next = page.Next
			return r, nil
		case page.Next == cursor:
			return Read{}, fmt.Errorf("alarmindex: sweeping %s: the store's cursor did not advance (%q)", prefix, cursor)
		}
		cursor = page.Next
	}
}

// Rand is the random source of the rotation over anyone's entries
// (*math/rand/v2.Rand has it): seeded in a simulation.
type Rand interface{ IntN(n int) int }

// Sweep is what Plan needs besides the entries.
type Sweep struct {
	Now    time.Time
	Margin time.Duration // as for Horizon
	Self   string        // this node's id
	// Shards are the nodes the entries are shared between: this app's live
	// nodes (fresh heartbeats), Self among them unless it drains. Empty:
	// Self alone. Order and repeats do not matter.
	Shards []string
	// Busy reports an actor whose alarm this node already has in flight or
	// retrying: its entries do not count. nil: none.
	Busy func(Key) bool
	// Rand starts the rotation over anyone's entries; required. Each node
	// seeds its own, so nodes start at different entries.
	Rand Rand
	Max  int // deliveries; 0: MaxDeliver
}

// Delivery is an entry a node delivers: the actor's alarm at Key.At.
type Delivery struct {
	Key    Key
	Anyone bool // delivered as anyone's, not from this node's shard
}

// Plan picks the entries this node delivers (book ADR 0009, point 4,
// plan_sweep). An actor counts once, at its earliest time read (its later
// entries come after it is delivered). Its own shard's entries go first, in
// due order; anyone's entries (AnyoneMargins margins overdue, another
// node's shard) keep 1/AnyoneShare of Max, taken from a random rotation so
// that nodes do not all deliver the same ones, and take what own entries
// leave. Entries of another shard not yet anyone's, and busy actors, are
// left out and use none of Max.
func Plan(keys []Key, s Sweep) []Delivery {
	max := s.Max
	if max <= 0 {
		max = MaxDeliver
	}
	shards := slices.Clone(s.Shards)
	if len(shards) == 0 {
		shards = []string{s.Self}
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	anyoneBy := s.Now.Add(-AnyoneMargins * s.Margin).UnixMilli()

	var own, anyone []Key
	seen := map[string]bool{}
	for _, k := range keys {
		addr := k.Address()
		if seen[addr] {
			continue
		}
		seen[addr] = true
		if s.Busy != nil && s.Busy(k) {
			continue
		}
		switch {
		case Shard(addr, shards) == s.Self:
			own = append(own, k)
		case k.At <= anyoneBy:
			anyone = append(anyone, k)
		}
	}
	reserve := min(max/AnyoneShare, len(anyone))
	nOwn := min(len(own), max-reserve)
	nAnyone := min(len(anyone), max-nOwn)
	out := make([]Delivery, 0, nOwn+nAnyone)
	for _, k := range own[:nOwn] {
		out = append(out, Delivery{Key: k})
	}
	if nAnyone > 0 {
		start := s.Rand.IntN(len(anyone))
		for i := range nAnyone {
			out = append(out, Delivery{Key: anyone[(start+i)%len(anyone)], Anyone: true})
		}
	}
	return out
}

// Shard is the node among nodes whose share the actor at addr (Key.Address)
// is: the highest score of a hash of node and address (rendezvous hashing),
// so a node joining or leaving moves only its own share, and nodes whose
// views differ by a node still agree on every other entry. "" for no nodes.
func Shard(addr string, nodes []string) string {
	var best string
	var bestScore uint64
	for _, n := range nodes {
		if sc := score(n, addr); best == "" || sc > bestScore || sc == bestScore && n < best {
			best, bestScore = n, sc
		}
	}
	return best
}

// score is FNV-1a of node and address, mixed (splitmix64's finaliser):
// FNV alone leaves near keys with near hashes.
func score(node, addr string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(node)))
	h.Write(n[:])
	h.Write([]byte(node))
	h.Write([]byte(addr))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
