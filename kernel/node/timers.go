package node

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// resetTimer arms t again for d, dropping a value it sent that nobody read
// (time.Timer does so itself since Go 1.23; clock.Manual's does not).
func resetTimer(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// withTimeout is context.WithTimeout on the node's clock. The context has
// no Deadline: only what waits on Done may use it (the wall-clock limit,
// which calls and fetches read back, stays on context.WithTimeout).
func (n *Node) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := n.clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}
