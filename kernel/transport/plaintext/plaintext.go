// Package plaintext is the kernel's built-in transport/v1 fallback: plain
// TCP between nodes, neither encrypted nor authenticated (as clock.Real is
// the built-in clock). It serves tests and --cluster-plaintext accept; the
// book asks that such nodes stay on a private network.
//
// What it keeps of the contract: Dial refuses a peer outside the trusted
// set (one the kernel does not know to be live) before connecting, and
// Trust cuts every connection it dialed to a peer that left the set or
// whose pin changed. What it cannot keep: it accepts any connection and
// cannot say from whom (Pin is "", PeerOf fails with
// transport.ErrUnauthenticated), so Trust cuts no accepted connection; what
// such a connection carries is trusted only as far as it is signed.
package plaintext

import (
	"context"
	"fmt"
	"net"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// Transport is plain TCP.
type Transport struct {
	t *transport.Tracker
}

var _ transport.Transport = (*Transport)(nil)

// New returns a plaintext transport that trusts nobody yet.
func New() *Transport { return &Transport{t: transport.NewTracker()} }

// Listen accepts any connection on addr.
func (p *Transport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := p.t.Listen(ctx, addr, nil)
	if err != nil {
		return nil, fmt.Errorf("plaintext: listen on %s: %w", addr, err)
	}
	return l, nil
}

// Dial connects to addr if peer is in the trusted set (at any pin, ""
// included), and ties the connection to peer at that pin, so that Trust
// cuts it when peer leaves the set or its pin changes. Nothing proves that
// what answers at addr is peer.
func (p *Transport) Dial(ctx context.Context, peer transport.NodeID, addr string) (net.Conn, error) {
	c, pin, err := p.t.Dial(ctx, peer, addr, false)
	if err != nil {
		return nil, fmt.Errorf("plaintext: dial %s at %s: %w", peer, addr, err)
	}
	if err := c.Bind(peer, pin); err != nil {
		// Trust dropped peer, or changed its pin, while this connected.
		c.Close()
		return nil, fmt.Errorf("plaintext: dial %s at %s: %w", peer, addr, err)
	}
	return c, nil
}

// PeerOf fails: nothing authenticates a plaintext peer.
func (p *Transport) PeerOf(conn net.Conn) (transport.Peer, error) {
	if _, ok := p.t.Owns(conn); !ok {
		return transport.Peer{}, fmt.Errorf("plaintext: PeerOf a %T this transport did not make", conn)
	}
	return transport.Peer{}, fmt.Errorf("plaintext: %w", transport.ErrUnauthenticated)
}

// Pin is "": this transport does not authenticate.
func (p *Transport) Pin() string { return "" }

// Trust replaces the trusted set and cuts what was dialed to peers that
// left it or changed pin.
func (p *Transport) Trust(peers map[transport.NodeID]string) { p.t.Trust(peers) }

// Close ends the listeners and every connection.
func (p *Transport) Close() error { return p.t.Close() }
