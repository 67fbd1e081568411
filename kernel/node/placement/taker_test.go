package placement

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

func peer(id, app string, taking nodelease.Taking, at time.Time) membership.Peer {
	return membership.Peer{ID: id, Object: nodelease.Object{State: nodelease.Live, Instance: "i" + id, Seq: 1, WrittenAt: at,
		Info: nodelease.Info{Advertise: "http://" + id, App: app, Taking: taking}}}
}

// The rendezvous choice does not depend on the peers' order, moves only
// the actors of a peer that leaves, and spreads actors over the peers.
func TestRendezvous(t *testing.T) {
	at := time.UnixMilli(0)
	three := []membership.Peer{peer("b", "t/a", "", at), peer("c", "t/a", "", at), peer("d", "t/a", "", at)}
	reversed := []membership.Peer{three[2], three[1], three[0]}
	count := map[string]int{}
	for i := range 300 {
		key := fmt.Sprintf("t/c/actor-%d", i)
		p, ok := Rendezvous(key, three)
		q, _ := Rendezvous(key, reversed)
		if !ok || p.ID != q.ID {
			t.Fatalf("%s: %q in one order, %q in the other", key, p.ID, q.ID)
		}
		count[p.ID]++
		if p.ID != "d" {
			if r, _ := Rendezvous(key, three[:2]); r.ID != p.ID {
				t.Errorf("%s moved from %s to %s when d left", key, p.ID, r.ID)
			}
		}
	}
	for _, id := range []string{"b", "c", "d"} {
		if count[id] < 60 {
			t.Errorf("peer %s chosen for %d of 300 actors: %v", id, count[id], count)
		}
	}
	if _, ok := Rendezvous("t/c/x", nil); ok {
		t.Error("a peer chosen among none")
	}
}

// A take goes only to a taker whose heartbeat names the call: the
// rendezvous choice among those.
func TestTakeTarget(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	view := membership.NewView("a", nodelease.DefaultSettings(), clk)
	take := func(p membership.Peer) membership.Peer {
		p.Object.Info.Capabilities = []string{"other", nodelease.CapabilityTake}
		return p
	}
	actor := ownership.Actor{Tenant: "t", Class: "c", Name: "n"}
	view.Update([]membership.Peer{peer("b", "t/a", "", clk.Now()), peer("c", "t/a", "", clk.Now())})
	if p, ok := TakeTarget(view, "t/a", actor); ok {
		t.Errorf("takers that name no take call: %q chosen, want none", p.ID)
	}
	view.Update([]membership.Peer{peer("b", "t/a", "", clk.Now()), take(peer("c", "t/a", "", clk.Now())),
		take(peer("d", "t/a", nodelease.Draining, clk.Now())), take(peer("e", "t/other", "", clk.Now()))})
	if p, ok := TakeTarget(view, "t/a", actor); !ok || p.ID != "c" {
		t.Errorf("one taker of t/a names take: %q %v, want c", p.ID, ok)
	}
}

// A node that takes no actor sends one nobody holds to the peer of its
// app that takes actors (never a draining one, one behind, another app's,
// or one not live), keeps no hint of it, and when there is none refuses it with
// ErrNoTaker if it must run none, or keeps it if it only drains (book ADR
// 0014); what a live peer holds still goes there.
func TestOwnedNotTaking(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	old := clk.Now().Add(-s.Horizon() - time.Second)
	view.Update([]membership.Peer{peer("b", "t/a", nodelease.Draining, clk.Now()), peer("c", "t/a", "", clk.Now()),
		peer("d", "t/other", "", clk.Now()), peer("e", "t/a", "", old)})
	key := func(a abi.Address) (ownership.Actor, error) {
		return ownership.Actor{Tenant: a.Tenant, Class: a.Class, Name: a.Name}, nil
	}
	addr := abi.Address{Tenant: "t", Class: "c", Name: "n"}
	claiming := ClaimsNone
	hints := NewHints(clk, MaxHints)
	r := records{}
	o := Owned{Records: &r, View: view, Self: "a", Key: key, Hints: hints, App: "t/a", Claiming: func() Claiming { return claiming }}
	if got, err := o.Place(context.Background(), addr); err != nil || got.Node != "c" || got.Addr != "http://c" || got.Hint || !got.Taker {
		t.Errorf("nobody holds it: %+v, %v; want c, the one peer of t/a taking actors, as its taker", got, err)
	}
	if _, ok := hints.Get(ownership.Actor{Tenant: "t", Class: "c", Name: "n"}); ok {
		t.Error("the chosen peer was kept as a hint of the actor's owner")
	}
	r = records{found: true, rec: ownership.Record{Node: "b", Instance: "ib", Generation: 3}}
	if got, err := o.Place(context.Background(), addr); err != nil || got.Node != "b" {
		t.Errorf("held by a draining peer: %+v, %v; want b, its holder", got, err)
	}
	r = records{}
	behind := peer("f", "t/a", "", clk.Now())
	behind.Object.Info.Behind = "cannot apply the app's current version"
	view.Update([]membership.Peer{peer("b", "t/a", nodelease.Stuck, clk.Now()), behind})
	if _, err := o.Place(context.Background(), addr); !errors.Is(err, ErrNoTaker) {
		t.Errorf("no peer takes actors (f is behind): %v, want ErrNoTaker", err)
	}
	claiming = ClaimsLast
	if got, err := o.Place(context.Background(), addr); err != nil || got != Here {
		t.Errorf("draining, no peer takes actors: %+v, %v; want Here (a drain never makes an actor unreachable)", got, err)
	}
	view.Update([]membership.Peer{peer("c", "t/a", "", clk.Now())})
	if got, err := o.Place(context.Background(), addr); err != nil || got.Node != "c" {
		t.Errorf("draining, c takes actors: %+v, %v; want c", got, err)
	}
	claiming = Claims
	if got, err := o.Place(context.Background(), addr); err != nil || got != Here {
		t.Errorf("taking again: %+v, %v; want Here", got, err)
	}
}
