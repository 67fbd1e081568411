package placement

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// A hint answers for less than HintTTL on the node's clock, Forget drops
// it, and the cache keeps at most its bound, dropping the oldest first
// (expired ones before any).
func TestHints(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	actor := func(i int) ownership.Actor { return ownership.Actor{Tenant: "t", Class: "c", Name: fmt.Sprint(i)} }
	b := ownership.Record{Node: "b", Instance: "ib", Generation: 1}

	h := NewHints(clk, 3)
	h.Put(actor(0), b)
	clk.Advance(HintTTL - time.Millisecond)
	if got, ok := h.Get(actor(0)); !ok || got != b {
		t.Fatalf("a hint 999 ms old: %+v %v, want b's", got, ok)
	}
	clk.Advance(time.Millisecond)
	if _, ok := h.Get(actor(0)); ok {
		t.Fatal("a hint 1 s old still answers")
	}
	if h.order.Len() != 0 || len(h.byActor) != 0 {
		t.Fatalf("an expired hint read is kept: %d, %d", h.order.Len(), len(h.byActor))
	}

	h.Put(actor(1), b)
	h.Forget(actor(1))
	if _, ok := h.Get(actor(1)); ok {
		t.Fatal("a forgotten hint answers")
	}

	// The bound: 1, 2 and 3 kept, 1 learned again (now the newest), then
	// 4 drops 2, the oldest.
	for i := 1; i <= 3; i++ {
		h.Put(actor(i), b)
	}
	h.Put(actor(1), b)
	h.Put(actor(4), b)
	for i, want := range map[int]bool{1: true, 2: false, 3: true, 4: true} {
		if _, ok := h.Get(actor(i)); ok != want {
			t.Errorf("actor %d kept: %v, want %v", i, ok, want)
		}
	}
	if h.order.Len() != 3 || len(h.byActor) != 3 {
		t.Fatalf("%d hints in order, %d by actor; want the bound, 3", h.order.Len(), len(h.byActor))
	}

	// A hint learned once they expired drops them all, unread.
	clk.Advance(HintTTL)
	h.Put(actor(5), b)
	if h.order.Len() != 1 || len(h.byActor) != 1 {
		t.Fatalf("%d hints after the others expired, want 1", h.order.Len())
	}

	// The node's bound holds under many actors.
	h = NewHints(clk, MaxHints)
	for i := range MaxHints + 100 {
		h.Put(actor(i), b)
	}
	if h.order.Len() != MaxHints || len(h.byActor) != MaxHints {
		t.Fatalf("%d hints, want at most %d", h.order.Len(), MaxHints)
	}
}

// A routing question is answered from the hint a record read left, with
// no read, for less than a second, only while its node is live in the
// view and in the same process; any other question reads the record, and
// a record that no longer names a live peer forgets the hint.
func TestOwnedHints(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	live := func(instance string) {
		view.Update([]membership.Peer{{ID: "b", Object: nodelease.Object{State: nodelease.Live, Instance: instance, Seq: 1,
			WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: "http://127.0.0.1:2"}}}})
	}
	live("ib")
	key := func(a abi.Address) (ownership.Actor, error) {
		return ownership.Actor{Tenant: a.Tenant, Class: a.Class, Name: a.Name}, nil
	}
	addr := abi.Address{Tenant: "t", Class: "c", Name: "n"}
	r := records{found: true, rec: ownership.Record{Node: "b", Instance: "ib", Generation: 3}}
	o := Owned{Records: &r, View: view, Self: "a", Key: key, Hints: NewHints(clk, MaxHints)}
	routing := Routed(context.Background())
	place := func(ctx context.Context, what string, node string, reads int) {
		t.Helper()
		r.reads = 0
		got, err := o.Place(ctx, addr)
		hinted := node != "" && reads == 0
		if err != nil || got.Node != node || r.reads != reads || got.Hint != hinted {
			t.Fatalf("%s: %+v %v after %d reads; want node %q after %d, told by a hint: %v", what, got, err, r.reads, node, reads, hinted)
		}
	}

	place(routing, "the first request", "b", 1)
	for i := range 200 {
		place(routing, fmt.Sprintf("request %d within the second", i), "b", 0)
	}
	place(context.Background(), "an event that is not only routed (an alarm, a call)", "b", 1)
	clk.Advance(HintTTL - time.Millisecond)
	place(routing, "a request 999 ms after the last read", "b", 0)
	clk.Advance(time.Millisecond)
	place(routing, "a request once the hint expired", "b", 1)

	o.Forget(addr)
	place(routing, "a request after the hint was dropped", "b", 1)

	// b restarted: a hint naming its earlier process is not used; the
	// record, naming nobody now, forgets it.
	live("ib2")
	r.rec = ownership.Record{Generation: 4}
	place(routing, "a hint naming an earlier process", "", 1)
	live("ib")
	place(routing, "the request after the record named nobody", "", 1)

	// Held here: the hold answers, whatever the hint.
	r.rec = ownership.Record{Node: "b", Instance: "ib", Generation: 5}
	place(routing, "learning b again", "b", 1)
	r.held = true
	place(routing, "an actor this process holds", "", 0)
}
