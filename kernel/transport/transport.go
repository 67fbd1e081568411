// Package transport is the contract between the kernel and the network that
// links the nodes of a cluster (transport/v1): forwarded requests, relayed
// WebSockets and calls between actors on different nodes. transport-mtls
// implements it with mutual TLS 1.3 and certificates pinned in the nodes'
// heartbeats (book ADR 0011, ADR 1029); kernel/transport/plaintext is the
// kernel's plain-TCP fallback, for tests and --cluster-plaintext accept.
// conformance/transporttest holds the rules every implementation passes.
//
// Trust. A transport holds a trusted set, node id to pin, that the kernel
// replaces (Trust) from its live view of the heartbeats: after every
// listing, and on an expiry tick. A connection belongs to the peer it was
// dialed to or, on a transport that authenticates, the peer its handshake
// proved; it lives only while that peer stays trusted at the same pin.
// Trust cuts every other one before it returns, so a fenced, released or
// expired peer, or one that restarted with a new key, keeps no pooled
// connection and no relayed WebSocket.
//
// Authentication. A transport authenticates its peers exactly when its
// Pin is not empty (Authenticates). One that does not (plaintext) still
// refuses to dial a peer outside the trusted set, and still cuts what it
// dialed to a peer that left it, but it accepts any connection and cannot
// name its peer (PeerOf: ErrUnauthenticated); what such a connection
// carries is authenticated above it (signed calls) or not at all.
//
// Addresses are host:port (127.0.0.1:7443, [::1]:7443, node-a:7443): the
// kernel strips the https:// of a --cluster-advertise URL.
package transport

import (
	"context"
	"errors"
	"net"
)

// API is the contract version a transport plugin declares.
const API = "transport/v1"

// Transport is what a transport plugin's New returns: one node's end of the
// cluster network, its identity made in New (a new one at every start). It
// is safe for concurrent use.
type Transport interface {
	// Listen accepts connections from peers on addr (host:port; port 0
	// picks one, the listener's Addr says which). ctx bounds setting the
	// listener up, not its life: Close it, or the transport. On a
	// transport that authenticates, an accepted connection's handshake
	// may complete lazily, on its first Read or Write or on PeerOf (as
	// crypto/tls does), bounded by the transport (transport-mtls:
	// handshake_timeout, 5 s by default);
	// only a peer trusted at the time of its handshake is accepted, and
	// a handshake from an unknown pin fails, so such a connection's
	// Reads and Writes fail and nothing it sent is read.
	Listen(ctx context.Context, addr string) (net.Listener, error)
	// Dial connects to addr (host:port) and returns a connection only if
	// the far end proves it is peer at the pin peer is trusted at when the
	// handshake runs; on a transport that authenticates, also only once
	// the far end has accepted this node in turn, so a returned
	// connection was accepted by both ends. A peer outside the trusted
	// set, or trusted at no pin ("") by a transport that authenticates, is
	// refused before anything is sent to addr; a peer that does not
	// prove it is peer, before any byte of the caller's is sent. Both
	// errors wrap ErrUntrusted. A far end that refuses this node at the
	// handshake (it does not trust this node's pin now) fails Dial with
	// an error wrapping ErrRefused. ctx bounds the dial and the
	// handshake.
	Dial(ctx context.Context, peer NodeID, addr string) (net.Conn, error)
	// PeerOf names the authenticated peer of a connection from this
	// transport's Listen or Dial, completing its handshake if it has not
	// run yet (bounded as Listen says). It fails with an error wrapping
	// ErrUnauthenticated on a transport that does not authenticate, with
	// the handshake's error if that failed (a peer outside the trusted
	// set: ErrUntrusted), and with ErrUntrusted once Trust has cut the
	// connection: a caller that checks it before each request it serves
	// on a kept-alive connection re-checks the peer's pin each time.
	PeerOf(conn net.Conn) (Peer, error)
	// Pin is what this node publishes in its heartbeat so that peers can
	// recognise it: a certificate fingerprint (transport-mtls: lowercase
	// hex SHA-256 of its certificate, 64 characters), fixed for the
	// transport's life. It is "" exactly when the transport does not
	// authenticate.
	Pin() string
	// Trust replaces the set of peers this node trusts, node id to pin,
	// with peers (which the transport does not keep: the caller may
	// change the map after). Before it returns, it closes every open
	// connection, dialed or accepted, whose peer is no longer in the set
	// at the same pin: a Read or Write blocked on one returns an error at
	// once. A pin of "" marks a peer known to be live that publishes no
	// pin: a transport that does not authenticate may dial it, one that
	// does refuses it. Until the first call, the set is empty.
	Trust(peers map[NodeID]string)
	// Close ends the transport: its listeners and every connection they
	// accepted or Dial returned are closed, and later calls to Listen
	// and Dial fail with an error wrapping net.ErrClosed. A second Close
	// does nothing.
	Close() error
}

// NodeID names a node of a cluster.
type NodeID string

// Peer is an authenticated peer: the node, and the pin its handshake
// proved.
type Peer struct {
	Node NodeID
	Pin  string
}

// ErrUntrusted: the peer is not in the trusted set at the pin it proved (or
// at all), or no longer is (a connection Trust cut).
var ErrUntrusted = errors.New("transport: peer not trusted")

// ErrRefused: the far end refused this node at the handshake: it does not
// trust this node's pin now (its view has not listed this node's latest
// heartbeat yet, or saw it expire). Nothing of the caller's was sent, so
// the peer read nothing. Only a transport that authenticates returns it.
var ErrRefused = errors.New("transport: the peer refused this node")

// ErrUnauthenticated: the transport does not authenticate its peers, so it
// cannot name a connection's peer (PeerOf on the plaintext transport).
var ErrUnauthenticated = errors.New("transport: connection not authenticated")

// Authenticates reports whether t authenticates its peers: whether its Pin
// is set.
func Authenticates(t Transport) bool { return t.Pin() != "" }
