package node

import (
	"context"
	"log/slog"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// placedAt is a placement that sends every actor to one owner.
type placedAt placement.Owner

func (p placedAt) Place(context.Context, abi.Address) (placement.Owner, error) {
	return placement.Owner(p), nil
}

// An alarm whose actor another node holds leaves this node's timer (the
// holder's fires it); one whose actor a move released to a target that
// holds nothing yet (ADR 1070) stays, deferred: if the take fails, no
// other timer has it. Fails with the successor taken for a holder.
func TestAlarmStaysForAMovesTarget(t *testing.T) {
	for _, owner := range []placement.Owner{{Node: "b"}, {Node: "b", Successor: true}} {
		n, c := nodeAlone()
		n.ctx, n.log = context.Background(), slog.New(slog.DiscardHandler)
		n.dep = &deployment{classes: map[string]*class{c.name: c}}
		n.opts.Placement = placedAt(owner)
		n.alarms = alarm.NewSchedule()
		key := n.actorKey(c, "x")
		n.deliverAlarm(&alarm.Item{Key: key, Class: c.name, Name: "x", At: n.clock.Now()}) // popped: no longer in the schedule
		if _, kept := n.alarms.At(key); kept != owner.Successor {
			t.Errorf("placed at %+v: the alarm kept on this node's timer %v, want %v", owner, kept, owner.Successor)
		}
	}
}
