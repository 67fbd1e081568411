package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// ownedNodeOn is clusterNodeOn's node with its own placement
// (placement.Owned: what a node with a bucket uses) and its view of its
// peers kept, its idle actors hibernating after idle (0: the default).
func ownedNodeOn(t *testing.T, b bucket.Bucket, id string, classes map[string]string, idle time.Duration) (*testNode, *cluster.Member) {
	t.Helper()
	tn, m := clusterNode(t, b, id, node.Options{Classes: classes, IdleTimeout: idle})
	go m.WatchPeers(t.Context())
	return tn, m
}

// takingSeen is node id's heartbeat line 12 as view last listed it.
func takingSeen(v *membership.View, id string) (nodelease.Taking, bool) {
	for _, p := range v.Peers() {
		if p.ID == id {
			return p.Object.Info.Taking, true
		}
	}
	return "", false
}

// waitTaker waits until m's view lists n live peers of the app that take
// actors.
func waitTaker(t *testing.T, m *cluster.Member, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "the peers to list each other", func() bool {
		return len(placement.Takers(m.View, app.Default.String())) == n
	})
}

// A drained node with no other node of its app keeps serving: an actor it
// held that hibernated since is taken again there, and a new one too
// (book ADR 0014: a drain never makes an actor unreachable); fails with
// the placement's fallback (placement.KeepsUnheld's ClaimsLast) removed.
func TestDrainedAloneKeepsServing(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	z, m := ownedNodeOn(t, mem, "z", map[string]string{"counter": counter(t)}, 200*time.Millisecond)
	z.expect("POST", "/actor/counter/kept", "", 200, "1\n")
	if err := cluster.RequestDrain(t.Context(), m.Root, "z"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "z to read its drain request", func() bool {
		return slices.Contains(z.node.NotTaking(), nodelease.ReasonDrain)
	})
	waitFor(t, 5*time.Second, "counter/kept to hibernate", func() bool {
		return z.metric("wasmkeep_actors_resident") == 0 && len(m.Owners.Holds()) == 0
	})
	z.expect("POST", "/actor/counter/kept", "", 200, "2\n")
	z.expect("POST", "/actor/counter/fresh", "", 200, "1\n")
}

// gatedOwners blocks (or fails) the writes of ownership records once armed.
type gatedOwners struct {
	bucket.Bucket
	armed   atomic.Bool
	fail    bool // fail them at once rather than block them until gate closes
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedOwners) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if g.armed.Load() && strings.Contains(key, ownership.Prefix) {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		if g.fail {
			return "", bucket.ErrTransient
		}
		<-g.gate
	}
	return g.Bucket.Put(context.WithoutCancel(ctx), key, body, size, cond)
}

// A drain that begins while an acquire is under way, or while an
// acquisition's outcome is unresolved, is not drained until it is over:
// the node may yet hold the actor. The first fails with the acquire's
// count left out of holdsAny, the second with ownership's pending.
func TestDrainWaitsForAcquires(t *testing.T) {
	engineNeutral(t)
	for _, fail := range []bool{false, true} {
		name := map[bool]string{false: "under way", true: "unresolved"}[fail]
		t.Run(name, func(t *testing.T) {
			mem := buckettest.NewMemory(buckettest.Flaws{})
			g := &gatedOwners{Bucket: mem, fail: fail, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
			classes := map[string]string{"counter": counter(t)}
			a, am := ownedNodeOn(t, g, "a", classes, 0)
			_, bm := ownedNodeOn(t, mem, "b", classes, 0)
			waitTaker(t, am, 1)
			waitTaker(t, bm, 1)
			g.armed.Store(true)
			opened := false
			defer func() {
				if !opened {
					close(g.gate)
				}
			}()
			posted := make(chan int, 1)
			go func() {
				code, _ := a.do("POST", "/actor/counter/x", "")
				posted <- code
			}()
			<-g.entered
			if fail {
				if code := <-posted; code != 503 {
					t.Fatalf("an acquire whose write failed: %d, want 503", code)
				}
			}
			if err := cluster.RequestDrain(t.Context(), mem, "a"); err != nil {
				t.Fatal(err)
			}
			var seen []nodelease.Taking
			waitFor(t, 5*time.Second, "b to see a take no actor", func() bool {
				st, _ := takingSeen(bm.View, "a")
				if st != nodelease.Takes {
					seen = append(seen, st)
				}
				return st != nodelease.Takes
			})
			if seen[0] != nodelease.Draining {
				t.Fatalf("a's state with an acquire %s as the drain began: %q, want draining", name, seen[0])
			}
			g.armed.Store(false)
			close(g.gate)
			opened = true
			if !fail {
				if code := <-posted; code != 200 {
					t.Errorf("the event whose acquire was under way: %d, want 200", code)
				}
			}
			waitFor(t, 10*time.Second, "a to show drained", func() bool {
				st, _ := takingSeen(bm.View, "a")
				return st == nodelease.Drained
			})
		})
	}
}

// An actor being handed over takes no new event: one sent while its queue
// runs gets 503 with Retry-After at once (the book's "503 for a moment"),
// rather than joining a queue the hand-over waits for. And a drain
// withdrawn while a batch waits for a long event is read at once: the
// node takes actors again before the event ends. The first fails with
// deliver's check of the hand-over removed, the second with the batch's
// wait not reading the drain request.
func TestHandOverRefusesNewEvents(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	classes := map[string]string{"probe": probe(t)}
	a, am := ownedNodeOn(t, mem, "a", classes, 0)
	_, bm := ownedNodeOn(t, mem, "b", classes, 0)
	waitTaker(t, am, 1)
	waitTaker(t, bm, 1)
	a.expect("POST", "/actor/probe/x/sleep?ms=0", "", 200, "slept")
	slow := make(chan int, 1)
	go func() {
		code, _ := a.do("POST", "/actor/probe/x/sleep?ms=4000", "")
		slow <- code
	}()
	time.Sleep(200 * time.Millisecond) // under way on a
	if err := cluster.RequestDrain(t.Context(), mem, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "b to see a draining", func() bool {
		st, _ := takingSeen(bm.View, "a")
		return st == nodelease.Draining
	})
	time.Sleep(100 * time.Millisecond) // the batch under way
	code, _, hdr := a.doH("POST", "/actor/probe/x/sleep?ms=0", "", nil)
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("an event for an actor being handed over: %d, Retry-After %q; want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	if err := cluster.WithdrawDrain(t.Context(), mem, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a to take actors again", func() bool { return len(a.node.NotTaking()) == 0 })
	select {
	case code = <-slow:
		t.Errorf("the long event ended (%d) before a read its drain withdrawn", code)
	default:
		code = <-slow
	}
	if code != 200 {
		t.Errorf("the long event a ran as the drain began: %d, want 200", code)
	}
}

// A deleted actor's hold, kept through its erase with its database
// closed, passes the acquire check of a node that takes no actor: its
// next event is served there, not refused (it is this node's). Fails
// with the check's own-hold case removed.
func TestNotTakingServesAnErasingActor(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	slow := &gatedDeletes{Bucket: mem, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	defer close(slow.gate)
	tn, _ := clusterNodeOn(t, slow, "a", map[string]string{"probe": probe(t)})
	if code, body := tn.do("POST", "/actor/probe/e1/token?t=a1", ""); code != 200 {
		t.Fatalf("token: %d %q", code, body)
	}
	if code, body := tn.do("POST", "/actor/probe/e1/delete?durable=1", ""); code != 200 || !strings.HasPrefix(body, "<nil>") {
		t.Fatalf("delete: %d %q", code, body)
	}
	select {
	case <-slow.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no erase began within 30 s of the delete")
	}
	tn.node.StopTaking("test")
	if code, body := tn.do("POST", "/actor/probe/e1/token?t=b1", ""); code != 200 || strings.TrimSpace(body) != "1" {
		t.Errorf("the erasing actor's next event on a node taking none: %d %q, want 200 and one token", code, body)
	}
}

// A node started while a drain request names it takes no actor from its
// first moment: before its alarm timer or its first request could claim
// one. Fails (as a race the node nearly always loses) with the read left
// to the taking pass's goroutine.
func TestStartedDrained(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	if err := cluster.RequestDrain(t.Context(), mem, "a"); err != nil {
		t.Fatal(err)
	}
	a, _ := clusterNodeOn(t, mem, "a", map[string]string{"counter": counter(t)})
	if got := a.node.NotTaking(); !slices.Equal(got, []string{nodelease.ReasonDrain}) {
		t.Errorf("a node started drained takes no actor for %q, want [drain]", got)
	}
}
