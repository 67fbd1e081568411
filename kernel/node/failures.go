package node

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// Failed events in the log (issue 29): every event that fails is logged
// once with its class, actor, kind, the status its sender got and the
// cause the sender is not told (the guest's trap, the limit it hit), at
// most failureLogRate lines a second on a node, in bursts of twice that,
// so a crashing actor under load cannot flood the log; the next line
// logged says how many were left out. A 503 (the client may retry: a
// hand-over, a restore not served in time) is logged at debug, the rest
// at warn.

// failureLogRate is how many failed events a second the log takes.
const failureLogRate = 10

// failureLog is the node's limit on those lines.
type failureLog struct {
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	skipped int // lines left out since the last one logged
}

// take reports whether a line may be logged now, and how many were left
// out before it.
func (f *failureLog) take(now time.Time) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() {
		f.tokens += now.Sub(f.last).Seconds() * failureLogRate
	} else {
		f.tokens = 2 * failureLogRate
	}
	f.tokens = min(f.tokens, 2*failureLogRate)
	f.last = now
	if f.tokens < 1 {
		f.skipped++
		return false, 0
	}
	f.tokens--
	skipped := f.skipped
	f.skipped = 0
	return true, skipped
}

// logFailure logs the failed event of kind on a, err being its outcome's
// error; one that sends the event to another node is not a failure.
func (a *actor) logFailure(kind string, err error) {
	var elsewhere *placement.Elsewhere
	if errors.As(err, &elsewhere) {
		return
	}
	_, code := outcomeStatus(err)
	level := slog.LevelWarn
	if code == http.StatusServiceUnavailable {
		level = slog.LevelDebug
	}
	n := a.node
	if !n.log.Enabled(n.ctx, level) {
		return
	}
	ok, skipped := n.failures.take(n.clock.Now())
	if !ok {
		return
	}
	attrs := []any{"class", a.class.name, "actor", a.addr.Name, "kind", kind, "status", code, "err", err}
	if skipped > 0 {
		attrs = append(attrs, "left_out_before", skipped)
	}
	n.log.Log(n.ctx, level, "event failed", attrs...)
}
