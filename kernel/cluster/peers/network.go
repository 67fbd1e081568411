// Package peers is a node's HTTP with the other nodes of its cluster, over
// the transports (transport/v1): requests forwarded to an actor's holder,
// WebSocket upgrades relayed to it, calls between actors, and the cluster
// listener that serves them, each request's peer checked against the
// membership view. A request that may have reached a peer is never sent
// twice (book, Running a cluster: How it works).
package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// Config is what a Network needs.
type Config struct {
	Self string           // this node's id
	App  string           // the app it serves, tenant/app: only its nodes are sent to
	View *membership.View // who is live, at which addresses and pins, serving which app
	// Secure reaches peers that publish a cluster address (mutual TLS);
	// nil when this node has no cluster listener.
	Secure transport.Transport
	// Plain reaches peers that publish none, at their advertised address;
	// nil unless --cluster-plaintext accept.
	Plain  transport.Transport
	Clock  clock.Clock
	Logger *slog.Logger
	// DialTimeout bounds opening a connection (5 s); AnswerTimeout the
	// wait for a written request's answer (the event wall clock, 30 s).
	DialTimeout, AnswerTimeout time.Duration
	// Heartbeats are this node's lease writes landing, for the resend of
	// a call or upgrade a peer refused at the handshake (resend.go); nil:
	// never resent. Period is the heartbeat period (the defaults' 3 s).
	Heartbeats *Heartbeats
	Period     time.Duration
}

// Network is this node's connections to its peers.
type Network struct {
	cfg     Config
	mu      sync.Mutex
	pools   map[string]*pool     // by peer id
	skipped map[string]time.Time // plain peers this node does not use: when last logged
}

// New returns a Network; Run keeps its trust current.
func New(cfg Config) *Network {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.AnswerTimeout == 0 {
		cfg.AnswerTimeout = 30 * time.Second
	}
	if cfg.Period == 0 {
		cfg.Period = nodelease.DefaultSettings().Period()
	}
	return &Network{cfg: cfg, pools: map[string]*pool{}, skipped: map[string]time.Time{}}
}

// Self is this node's id.
func (n *Network) Self() string { return n.cfg.Self }

// trustTick is how often the trusted set is recomputed between listings:
// a peer whose heartbeat expires is distrusted, its connections cut,
// within this (book: relayed WebSockets cut within 500 ms).
const trustTick = 500 * time.Millisecond

// Run keeps the transports' trusted sets equal to the view's live peers
// until ctx ends: at once, then every trustTick. A listing should call
// Refresh too, so a fenced or released peer is cut at once.
func (n *Network) Run(ctx context.Context) {
	for n.Refresh(); clock.Sleep(ctx, n.cfg.Clock, trustTick) == nil; {
		n.Refresh()
	}
}

// Refresh hands the live peers to the transports, which cut the
// connections of any peer no longer trusted at the same pin, and drops
// this node's pooled connections to such peers.
func (n *Network) Refresh() {
	live := n.cfg.View.Trusted()
	secure, plain := map[transport.NodeID]string{}, map[transport.NodeID]string{}
	for id, pin := range live {
		if pin != "" {
			secure[transport.NodeID(id)] = pin
		} else {
			plain[transport.NodeID(id)] = ""
		}
	}
	if n.cfg.Secure != nil {
		n.cfg.Secure.Trust(secure)
	}
	if n.cfg.Plain != nil {
		n.cfg.Plain.Trust(plain)
	}
	n.mu.Lock()
	var stale []*pool
	for id, p := range n.pools {
		if r, err := n.route(id); err != nil || r != p.route {
			stale = append(stale, p)
			delete(n.pools, id)
		}
	}
	n.mu.Unlock()
	for _, p := range stale {
		p.close()
	}
}

// Close drops every pooled connection.
func (n *Network) Close() {
	n.mu.Lock()
	pools := n.pools
	n.pools = map[string]*pool{}
	n.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// route is how a peer is reached now.
type route struct {
	tr   transport.Transport
	addr string // host:port
	pin  string
}

// ErrNoRoute is a peer this node may not send to now: not live in its
// view, or reachable only in a way this node does not use.
var ErrNoRoute = errors.New("no route to the node")

// route says how to reach peer now: over TLS at its cluster address when
// it publishes one (never in plain text then), else in plain text at its
// advertised address when this node accepts that. A peer serving another
// app has no route: forwarding, relaying and calls stay within the app.
func (n *Network) route(peer string) (route, error) {
	p, err := n.cfg.View.Live(peer)
	if err != nil {
		return route{}, fmt.Errorf("%w: node %s is not live", ErrNoRoute, peer)
	}
	info := p.Object.Info
	if info.App != n.cfg.App {
		return route{}, fmt.Errorf("%w: node %s serves app %s, this node %s", ErrNoRoute, peer, info.App, n.cfg.App)
	}
	if info.ClusterAddr != "" {
		if n.cfg.Secure == nil {
			return route{}, fmt.Errorf("%w: node %s is reached over TLS only and this node has no cluster listener", ErrNoRoute, peer)
		}
		addr, err := hostPort(info.ClusterAddr)
		if err != nil {
			return route{}, fmt.Errorf("%w: node %s's cluster address: %v", ErrNoRoute, peer, err)
		}
		return route{tr: n.cfg.Secure, addr: addr, pin: p.Pin()}, nil
	}
	if n.cfg.Plain == nil {
		return route{}, fmt.Errorf("%w: node %s has no cluster listener and this node refuses plain HTTP between nodes (--cluster-plaintext refuse)", ErrNoRoute, peer)
	}
	addr, err := hostPort(info.Advertise)
	if err != nil {
		return route{}, fmt.Errorf("%w: node %s's advertised address: %v", ErrNoRoute, peer, err)
	}
	return route{tr: n.cfg.Plain, addr: addr}, nil
}

// pool returns the connection pool for peer's current route.
func (n *Network) pool(peer string) (*pool, error) {
	r, err := n.route(peer)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		if p, lerr := n.cfg.View.Live(peer); lerr == nil && p.Object.Info.App == n.cfg.App && p.Object.Info.ClusterAddr == "" && n.cfg.Plain == nil {
			n.logSkippedLocked(peer)
		}
		return nil, err
	}
	p := n.pools[peer]
	if p != nil && p.route == r {
		return p, nil
	}
	if p != nil {
		go p.close()
	}
	p = &pool{peer: peer, route: r, dialTimeout: n.cfg.DialTimeout}
	n.pools[peer] = p
	return p, nil
}

// logSkippedLocked says, at most once a minute per peer, that a live
// peer without a cluster listener is not used (book: Encryption between
// nodes, refusing plain HTTP).
func (n *Network) logSkippedLocked(peer string) {
	now := n.cfg.Clock.Now()
	if last, ok := n.skipped[peer]; ok && now.Sub(last) < time.Minute {
		return
	}
	n.skipped[peer] = now
	n.cfg.Logger.Warn("a live node without a cluster listener is not used: its actors get 503 here and calls to them fail (--cluster-plaintext refuse)", "node", peer)
}

// hostPort is an http:// or https:// URL's host:port.
func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", raw)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	switch u.Scheme {
	case "https":
		return net.JoinHostPort(u.Hostname(), "443"), nil
	case "http":
		return net.JoinHostPort(u.Hostname(), "80"), nil
	}
	return "", fmt.Errorf("%q is not an http:// or https:// URL", raw)
}
