package placement

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// A full node relocates an actor only to a live peer of its app that
// takes actors and says it has room: never to one without room (or that
// does not say), a draining one, one behind, another app's or one not
// live; with none, nowhere.
func TestRelocation(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	roomy := func(p membership.Peer, room int) membership.Peer { p.Object.Info.Room = room; return p }
	old := clk.Now().Add(-s.Horizon() - time.Second)
	behind := roomy(peer("f", "t/a", "", clk.Now()), 5)
	behind.Object.Info.Behind = "class c: not deployed here"
	others := []membership.Peer{peer("b", "t/a", "", clk.Now()), roomy(peer("c", "t/a", nodelease.Draining, clk.Now()), 5),
		roomy(peer("d", "t/other", "", clk.Now()), 5), roomy(peer("e", "t/a", "", old), 5), behind}
	view.Update(others)
	if got, ok := Relocation(view, "t/a", "t/c/n"); ok {
		t.Fatalf("relocated to %+v with no peer that takes actors and has room", got)
	}
	view.Update(append(others, roomy(peer("g", "t/a", "", clk.Now()), 1)))
	if got, ok := Relocation(view, "t/a", "t/c/n"); !ok || got.Node != "g" || got.Addr != "http://g" || got.Hint {
		t.Errorf("relocated to %+v, %v; want g, the one peer of t/a taking actors with room", got, ok)
	}
}
