// Package transport is the contract between the kernel and the network that
// links the nodes of a cluster (transport/v1): forwarded requests, relayed
// WebSockets and calls between actors on different nodes. transport-mtls
// implements it with mutual TLS and pinned certificates (book ADR 0011).
package transport

import (
	"context"
	"net"
)

// API is the contract version a transport plugin declares.
const API = "transport/v1"

// Transport is what a transport plugin's New returns.
type Transport interface {
	// Listen accepts connections from peers on addr. Every accepted
	// connection's peer has been authenticated.
	Listen(ctx context.Context, addr string) (net.Listener, error)
	// Dial connects to the peer that advertises addr and proves it is the
	// node named peer; anything else is refused.
	Dial(ctx context.Context, peer NodeID, addr string) (net.Conn, error)
	// PeerOf names the authenticated peer of a connection from Listen or
	// Dial.
	PeerOf(conn net.Conn) (Peer, error)
	// Pin is what this node publishes in its heartbeat so that peers can
	// recognise it (a certificate fingerprint).
	Pin() string
	// Trust replaces the set of peers this node accepts, from the live
	// heartbeats: node id to pin.
	Trust(peers map[NodeID]string)
	Close() error
}

// NodeID names a node of a cluster.
type NodeID string

// Peer is an authenticated peer.
type Peer struct {
	Node NodeID
	Pin  string
}
