package peers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

type ctxKey int

const (
	connKey ctxKey = iota
	peerKey
)

// FromPeer names the node a request came from on the cluster listener,
// authenticated by the transport and live in the view when the request
// arrived; ok is false for any other request (the public port).
func FromPeer(ctx context.Context) (node string, ok bool) {
	node, ok = ctx.Value(peerKey).(string)
	return node, ok
}

// ClusterServer serves h to peers on the cluster listener ln (from
// Config.Secure's Listen): only actor paths and the health and readiness
// checks, and only to a peer that is live in the view at the pin it
// authenticated with, checked on every request, so a kept-alive connection
// of a peer no longer trusted is refused (503, and closed).
func (n *Network) ClusterServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           n.clusterHandler(h),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey, c)
		},
	}
}

func (n *Network) clusterHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey).(net.Conn)
		peer, err := n.authenticate(c)
		if err != nil {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "this node does not trust the caller now: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		p := r.URL.Path
		if !strings.HasPrefix(p, "/actor/") && p != "/_wasmkeep/health" && p != "/_wasmkeep/ready" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey, peer)))
	})
}

// authenticate names c's peer if it is live now at the pin it proved.
func (n *Network) authenticate(c net.Conn) (string, error) {
	if c == nil || n.cfg.Secure == nil {
		return "", transport.ErrUnauthenticated
	}
	p, err := n.cfg.Secure.PeerOf(c)
	if err != nil {
		return "", err
	}
	live, err := n.cfg.View.Live(string(p.Node))
	if err != nil || live.Pin() != p.Pin {
		return "", fmt.Errorf("%w: node %s is not live at the pin it proved", transport.ErrUntrusted, p.Node)
	}
	return string(p.Node), nil
}
