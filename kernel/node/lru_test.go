package node

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node/mailbox"
)

// lruNode is a node with only what the least recently active actor's
// choice reads: the registered actors, their times, events, queues and
// claims.
func lruNode() *Node { return &Node{actors: map[string]*actor{}} }

func lruActor(n *Node, key string, at int64) *actor {
	a := &actor{key: key, queue: mailbox.New[*event](4)}
	a.lastActive.Store(at)
	n.register(a)
	return a
}

// TestLeastRecentIsAScansChoice: through actors registered and retired,
// events that move their times (as events do, without the node's lock),
// busy actors, queued events and claims, leastRecent picks the actor a
// scan of every actor picks (times are distinct, so it is one actor).
func TestLeastRecentIsAScansChoice(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := lruNode()
		var now int64
		var keys []string
		for step := range 2000 {
			now++
			switch op := rng.IntN(10); {
			case op < 2 || len(keys) == 0:
				key := fmt.Sprint("a", step)
				lruActor(n, key, now)
				keys = append(keys, key)
			case op == 2:
				i := rng.IntN(len(keys))
				n.unregister(n.actors[keys[i]])
				keys = append(keys[:i], keys[i+1:]...)
			case op < 6: // an event ended
				n.actors[keys[rng.IntN(len(keys))]].lastActive.Store(now)
			case op == 6:
				a := n.actors[keys[rng.IntN(len(keys))]]
				a.busy.Store(!a.busy.Load())
			case op == 7:
				a := n.actors[keys[rng.IntN(len(keys))]]
				if a.queue.Len() == 0 {
					a.queue.Push(&event{})
				} else {
					a.queue.Pop()
				}
			case op == 8:
				a := n.actors[keys[rng.IntN(len(keys))]]
				if a.claim == nil {
					a.claim = make(chan bool, 1)
				} else {
					a.claim = nil
				}
			default:
				want, got := n.scanLeastRecent(), n.leastRecent()
				if got != want {
					t.Fatalf("seed %d, step %d: leastRecent chose %v, a scan %v", seed, step, keyOf(got), keyOf(want))
				}
			}
			if len(n.lru) != len(n.actors) {
				t.Fatalf("seed %d, step %d: %d in the heap for %d actors", seed, step, len(n.lru), len(n.actors))
			}
		}
	}
}

// TestLeastRecentPastManyBusy: with more busy actors before the first idle
// one than it takes off the heap, leastRecent still finds that one (by a
// scan), leaves every actor in the heap, and finds the next one by the heap
// once those are idle.
func TestLeastRecentPastManyBusy(t *testing.T) {
	n := lruNode()
	var busy []*actor
	for i := range 2 * passLimit {
		a := lruActor(n, fmt.Sprint("busy", i), int64(i))
		a.busy.Store(true)
		busy = append(busy, a)
	}
	idle := lruActor(n, "idle", 1000)
	lruActor(n, "later", 2000)
	if got := n.leastRecent(); got != idle {
		t.Fatalf("chose %s, want idle", keyOf(got))
	}
	if len(n.lru) != len(n.actors) {
		t.Fatalf("%d in the heap for %d actors", len(n.lru), len(n.actors))
	}
	for _, a := range busy {
		a.busy.Store(false)
	}
	if got := n.leastRecent(); got != busy[0] {
		t.Fatalf("once idle: chose %s, want busy0", keyOf(got))
	}
}

func keyOf(a *actor) string {
	if a == nil {
		return "none"
	}
	return a.key
}

// BenchmarkLeastRecent is an admission's choice of the actor to evict
// among resident actors, each active once since the last choice; busy: the
// least recently active half of them are in an event.
func BenchmarkLeastRecent(b *testing.B) {
	for _, busy := range []bool{false, true} {
		for _, resident := range []int{1_000, 10_000, 50_000} {
			b.Run(fmt.Sprintf("busy=%v/%d", busy, resident), func(b *testing.B) {
				n := lruNode()
				var now int64
				for i := range resident {
					now++
					lruActor(n, fmt.Sprint("a", i), now).busy.Store(busy && i < resident/2)
				}
				for b.Loop() {
					a := n.leastRecent()
					now++
					a.lastActive.Store(now) // evicted and replaced by one as new
				}
			})
		}
	}
}
