package peers

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// A caller its peer briefly stopped trusting (book, Running a cluster:
// Encryption between nodes): a peer that refused this node at the TLS
// handshake read nothing of the request, and trusts this node again once
// it listed this node's next heartbeat. A call, or a relayed WebSocket
// upgrade (no body), is then sent once more: after this node's next lease
// write reached the bucket and two heartbeat periods more passed, so the
// peer listed it. If that write does not land within two periods, or the
// caller leaves, it is not sent again. A forwarded request is not (its
// body is not kept), nor anything that may have reached the peer.

// Heartbeats tells the requests waiting for it that this node's next
// lease write reached the bucket. The lease's Wrote event feeds it.
type Heartbeats struct {
	mu   sync.Mutex
	next chan struct{} // closed when the next write lands
}

// NewHeartbeats returns Heartbeats no write has reached yet.
func NewHeartbeats() *Heartbeats { return &Heartbeats{next: make(chan struct{})} }

// Wrote is one lease write's end: nil, it reached the bucket.
func (h *Heartbeats) Wrote(err error) {
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.next)
	h.next = make(chan struct{})
}

// landed is closed when the next write, one that ends after this call,
// reaches the bucket.
func (h *Heartbeats) landed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next
}

// afterBeat returns what waitToResend waits on: the next heartbeat from
// before a request's first try (nil with no Heartbeats: never resent).
func (n *Network) afterBeat() <-chan struct{} {
	if n.cfg.Heartbeats == nil {
		return nil
	}
	return n.cfg.Heartbeats.landed()
}

// waitToResend reports whether a request that failed with err may be sent
// once more, having waited for it: err is a refusal (Failure.Refused),
// beat (afterBeat, taken before the first try) landed within two periods,
// and two periods more passed, with the caller still there.
func (n *Network) waitToResend(ctx context.Context, err error, beat <-chan struct{}) bool {
	var f *Failure
	if beat == nil || !errors.As(err, &f) || !f.Refused || ctx.Err() != nil {
		return false
	}
	period := n.cfg.Period
	n.cfg.Logger.Info("a peer refused this node's certificate; sending once more after this node's next heartbeat", "node", f.Peer)
	t := n.cfg.Clock.NewTimer(2 * period)
	defer t.Stop()
	select {
	case <-beat:
	case <-t.C():
		n.cfg.Logger.Warn("this node's heartbeat did not land in time: the refused request is not sent again", "node", f.Peer)
		return false
	case <-ctx.Done():
		return false
	}
	return clock.Sleep(ctx, n.cfg.Clock, 2*period) == nil
}

// Call sends an actors.call to peer as Send does, and once more after a
// refusal at the handshake (waitToResend); req's body must be one
// GetBody gives again (http.NewRequest's from a bytes.Reader).
func (n *Network) Call(ctx context.Context, peer string, req *http.Request) (*http.Response, error) {
	beat := n.afterBeat()
	resp, err := n.Send(ctx, peer, req)
	if req.GetBody == nil || !n.waitToResend(ctx, err, beat) {
		return resp, err
	}
	body, gerr := req.GetBody()
	if gerr != nil {
		return resp, err
	}
	req.Body = body
	return n.Send(ctx, peer, req)
}
