package ownership

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/simtest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// Two nodes on real leases, their clocks a max skew apart, each acquiring
// and releasing three actors at random over a bucket that fails, loses
// replies, hangs and holds writes to land them later (seeded per node),
// each fencing the other when it may. Checked at every tick: never two
// owners of an actor; over the run: never one generation for two holds.
// The seed fixes each node's faults and operations, not how the two
// nodes' goroutines interleave inside one 50 ms tick (repeated runs gave
// the same output, but that is not guaranteed; issue 14 item 3's
// simulation is where a failing seed must reproduce exactly).
// One node is cut off for 25 s in every run, so most runs fence it and it
// loses its lease. The runs must have seen held writes land, or they prove
// little. Planted bug caught: Acquire reusing the record's generation
// (seed 0). Not caught here, each by a deterministic test instead: no
// takeover bound (TestFailoverUnderSkewNeverTwoOwners: the overlap window
// is narrower than these random operations hit) and an unconditional lease
// write (TestFencedNodeLosesItsLease: there is no twin process here).
func TestRandomNodesOnRealLeases(t *testing.T) {
	landed := 0
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				landed += randomRun(t, seed)
			})
		})
	}
	if landed == 0 {
		t.Fatal("no held write landed in any run")
	}
}

func randomRun(t *testing.T, seed uint64) int {
	w := newWorld(t)
	skew := nodelease.DefaultSettings().MaxSkew
	ms := []*member{
		w.member("a", "ia", simtest.Skewed{Clock: w.clk, D: -skew}),
		w.member("b", "ib", simtest.Skewed{Clock: w.clk, D: skew}),
	}
	rates := map[faulty.Kind]float64{faulty.Fail: 0.05, faulty.LostReply: 0.05, faulty.Hang: 0.02, faulty.Hold: 0.04}
	for i, m := range ms {
		m.fb.Random(seed*2+uint64(i), rates)
	}
	actors := []Actor{{"t", "c", "0"}, {"t", "c", "1"}, {"t", "c", "2"}}
	type hold struct {
		a Actor
		g uint64
	}
	var mu sync.Mutex
	seen := map[hold]string{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, m := range ms {
		peer := ms[1-i].lease.NodeID()
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		f := m.lease.Fencer()
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := clock.Sleep(ctx, w.clk, time.Duration(100+rng.IntN(900))*time.Millisecond); err != nil {
					return
				}
				if m.lostErr() != nil {
					return
				}
				x := actors[rng.IntN(len(actors))]
				switch rng.IntN(5) {
				case 0, 1:
					_, had := m.owners.Owns(x)
					if h, err := m.owners.Acquire(ctx, x); err == nil && !had {
						mu.Lock()
						if by, ok := seen[hold{x, h.Generation}]; ok {
							t.Errorf("generation %d of %s made two holds (%s, then %s)", h.Generation, x, by, m.lease.NodeID())
						}
						seen[hold{x, h.Generation}] = m.lease.NodeID()
						mu.Unlock()
					}
				case 2:
					if h, ok := m.owners.Owns(x); ok {
						m.owners.Release(ctx, h)
					}
				case 3:
					m.owners.Resolve(ctx)
				case 4:
					if r, err := nodelease.ReadObject(ctx, w.mem, peer); err == nil && r.Found {
						f.Observe(peer, r.Body)
					}
					f.TryFence(ctx, peer)
				}
			}
		})
	}
	landed := 0
	cutNode, cutAt := rand.New(rand.NewPCG(seed, 9)).IntN(2), time.Duration(5+seed%20)*time.Second
	t0 := w.clk.Since()
	for range 1200 { // a minute
		switch w.clk.Since() - t0 {
		case cutAt: // one node is cut off for 25 s: long enough to be fenced
			ms[cutNode].fb.Cut(true)
		case cutAt + 25*time.Second:
			ms[cutNode].fb.Cut(false)
		}
		w.clk.Step(simtest.Tick)
		for _, x := range actors {
			_, ao := ms[0].owners.Owns(x)
			_, bo := ms[1].owners.Owns(x)
			if ao && bo {
				t.Fatalf("seed %d: both nodes own %s at %v", seed, x, w.clk.Since())
			}
		}
		for _, m := range ms {
			if m.fb.Held() > 0 && (w.clk.Since()-t0)%(2*time.Second) == 0 {
				landed += m.fb.Land()
			}
		}
	}
	cancel()
	for _, m := range ms {
		m.fb.Random(0, nil)
		m.fb.Cut(false)
		m.fb.Drop()
	}
	w.clk.Step(5 * time.Second)
	wg.Wait()
	for _, m := range ms {
		w.stopMember(m)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("seed %d: %d holds, %d held writes landed, node %d cut at %v, faults a %v b %v, lost a %v b %v", seed, len(seen), landed, cutNode, cutAt,
		ms[0].fb.Counts, ms[1].fb.Counts, ms[0].lostErr(), ms[1].lostErr())
	if len(seen) < 5 {
		t.Fatalf("seed %d: only %d holds", seed, len(seen))
	}
	return landed
}
