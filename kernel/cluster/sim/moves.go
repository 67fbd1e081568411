package sim

import (
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// Moves (Config.Moves; ADR 1070): a release now and then names a
// successor, as a move's does, another node's live process in the
// releaser's view, for 11 s; an event landing elsewhere is relayed to it
// while the record names nobody and it (relay), where it acquires the
// actor as any event would; and now and then the releaser clears it at
// once, as a move whose take failed does. Which releases do is decided by
// the hold's generation, so a seed replays exactly. The invariants are the
// base run's: a successor decides no ownership, and the clearing is one
// more conditional write on the records.

// successor is the successor p's release of h names: none outside the
// moves' workload, or for an odd generation.
func (p *process) successor(h ownership.Hold) ownership.Successor {
	w := p.w
	if !w.cfg.Moves || h.Generation%2 != 0 {
		return ownership.Successor{}
	}
	var live []ownership.Successor
	for _, peer := range p.member.View.Peers() {
		if _, err := p.member.View.Live(peer.ID); err == nil {
			live = append(live, ownership.Successor{Node: peer.ID, Instance: peer.Object.Instance, Until: p.clk.Now().Add(11 * time.Second)})
		}
	}
	if len(live) == 0 {
		return ownership.Successor{}
	}
	w.mu.Lock()
	w.res.Successors++
	w.mu.Unlock()
	return live[int(h.Generation/2)%len(live)]
}

// failedTake clears the successor p's release of h named, for one
// generation in two that named one.
func (p *process) failedTake(x ownership.Actor, h ownership.Hold, next ownership.Successor) {
	w := p.w
	if next.Node == "" || h.Generation%4 != 0 {
		return
	}
	err := p.member.Owners.ClearSuccessor(p.ctx, x, next)
	if err == nil {
		w.mu.Lock()
		w.res.Cleared++
		w.mu.Unlock()
	}
	w.note(p, "clears the successor %s of %s: failed %v", next.Node, x, err != nil)
}
