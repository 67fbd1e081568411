package placement

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

type records struct {
	held  bool
	rec   ownership.Record
	found bool
	err   error
	reads int
}

func (r *records) Owns(ownership.Actor) (ownership.Hold, bool) { return ownership.Hold{}, r.held }
func (r *records) Owner(context.Context, ownership.Actor) (ownership.Record, bool, error) {
	r.reads++
	return r.rec, r.found, r.err
}

// Owned runs here what this process holds (no read), what nobody, this
// node or a node not live holds, and what an earlier process of a live
// node held; only a live peer's own hold goes there.
func TestOwned(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	view.Update([]membership.Peer{{ID: "b", Object: nodelease.Object{State: nodelease.Live, Instance: "ib", Seq: 1,
		WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: "http://127.0.0.1:2"}}}})
	key := func(a abi.Address) (ownership.Actor, error) {
		return ownership.Actor{Tenant: a.Tenant, Class: a.Class, Name: a.Name}, nil
	}
	addr := abi.Address{Tenant: "t", Class: "c", Name: "n"}
	down := errors.New("bucket down")
	for _, c := range []struct {
		name  string
		r     records
		owner string
		err   error
	}{
		{"held here", records{held: true, err: down}, "", nil},
		{"no record", records{}, "", nil},
		{"nobody", records{found: true, rec: ownership.Record{Generation: 3}}, "", nil},
		{"this node", records{found: true, rec: ownership.Record{Node: "a", Instance: "old", Generation: 3}}, "", nil},
		{"a live peer", records{found: true, rec: ownership.Record{Node: "b", Instance: "ib", Generation: 3}}, "b", nil},
		{"a live peer's earlier process", records{found: true, rec: ownership.Record{Node: "b", Instance: "old", Generation: 3}}, "", nil},
		{"a node not in view", records{found: true, rec: ownership.Record{Node: "z", Instance: "iz", Generation: 3}}, "", nil},
		{"the record unread", records{err: down}, "", down},
	} {
		r := c.r
		o := Owned{Records: &r, View: view, Self: "a", Key: key, Hints: NewHints(clk, MaxHints)}
		got, err := o.Place(context.Background(), addr)
		if got.Node != c.owner || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("%s: %+v %v; want node %q, error %v", c.name, got, err, c.owner, c.err)
		}
		if c.r.held && r.reads != 0 {
			t.Errorf("%s: read the record", c.name)
		}
	}
	clk.Advance(s.Horizon())
	r := records{found: true, rec: ownership.Record{Node: "b", Instance: "ib", Generation: 3}}
	if got, _ := (Owned{Records: &r, View: view, Self: "a", Key: key, Hints: NewHints(clk, MaxHints)}).Place(context.Background(), addr); got != Here {
		t.Errorf("a peer past its horizon: %+v, want Here", got)
	}
}

// A record a move released to a successor (ADR 1070) sends the actor's
// events to it while it is that process, takes actors and the record's
// time has not passed; past any of those, and on the successor itself,
// the actor stays here to be claimed. Never kept as a hint.
func TestOwnedSuccessor(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	peer := func(id string, taking nodelease.Taking) membership.Peer {
		return membership.Peer{ID: id, Object: nodelease.Object{State: nodelease.Live, Instance: "i" + id, Seq: 1,
			WrittenAt: clk.Now(), Info: nodelease.Info{App: "t/app", Advertise: "http://127.0.0.1:2", Taking: taking}}}
	}
	view.Update([]membership.Peer{peer("b", nodelease.Takes), peer("d", nodelease.Draining)})
	key := func(a abi.Address) (ownership.Actor, error) {
		return ownership.Actor{Tenant: a.Tenant, Class: a.Class, Name: a.Name}, nil
	}
	until := clk.Now().Add(10 * time.Second)
	released := func(node, inst string) ownership.Record {
		return ownership.Record{Generation: 3, Next: ownership.Successor{Node: node, Instance: inst, Until: until}}
	}
	hints := NewHints(clk, MaxHints)
	place := func(self string, rec ownership.Record) Owner {
		o := Owned{Records: &records{found: true, rec: rec}, View: view, Self: self, Key: key, Hints: hints, App: "t/app", Clock: clk}
		got, err := o.Place(context.Background(), abi.Address{Tenant: "t", Class: "c", Name: "n"})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct {
		name, self string
		rec        ownership.Record
		owner      string
	}{
		{"a successor that takes actors", "a", released("b", "ib"), "b"},
		{"on the successor", "b", released("b", "ib"), ""},
		{"another process of the successor", "a", released("b", "old"), ""},
		{"a draining successor", "a", released("d", "id"), ""},
		{"a successor not in view", "a", released("z", "iz"), ""},
	} {
		if got := place(c.self, c.rec); got.Node != c.owner || got.Hint || got.Taker || got.Successor != (c.owner != "") {
			t.Errorf("%s: %+v, want node %q", c.name, got, c.owner)
		}
	}
	if _, ok := hints.Get(ownership.Actor{Tenant: "t", Class: "c", Name: "n"}); ok {
		t.Error("a successor was kept as a hint")
	}
	clk.Advance(10 * time.Second)
	if got := place("a", released("b", "ib")); got != Here {
		t.Errorf("past the successor's time: %+v, want Here", got)
	}
}
