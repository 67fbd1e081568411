package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Tracker is the part of a transport that Trust and Close act on: the
// trusted set, every open connection with the peer it belongs to, every
// listener. transport-mtls and the plaintext transport are both built on
// it; an implementation of the contract may use it or not.
//
// A connection is tracked from the moment its socket exists (Dial, Accept)
// until its Close. Binding it to a peer (Bind, BindPin) checks the trusted
// set and records the peer under the same lock Trust takes, so no
// connection can be bound to a peer that a Trust call has already dropped
// and then escape that call's cut.
type Tracker struct {
	mu        sync.Mutex
	trusted   map[NodeID]string
	conns     map[*Conn]struct{}
	listeners map[*listener]struct{}
	closed    bool
}

// NewTracker returns a tracker with an empty trusted set.
func NewTracker() *Tracker {
	return &Tracker{trusted: map[NodeID]string{}, conns: map[*Conn]struct{}{}, listeners: map[*listener]struct{}{}}
}

// Trusted returns the pin peer is trusted at, and whether it is trusted.
func (t *Tracker) Trusted(peer NodeID) (pin string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pin, ok = t.trusted[peer]
	return pin, ok
}

// Trust replaces the trusted set with a copy of peers and, before it
// returns, cuts every connection bound to a peer no longer in it at the
// same pin: its socket is closed, so a Read or Write blocked on it returns,
// and its later errors wrap ErrUntrusted.
func (t *Tracker) Trust(peers map[NodeID]string) {
	set := make(map[NodeID]string, len(peers))
	for id, pin := range peers {
		set[id] = pin
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trusted = set
	for c := range t.conns {
		if !c.bound {
			continue
		}
		if pin, ok := set[c.peer.Node]; ok && pin == c.peer.Pin {
			continue
		}
		t.cutLocked(c, fmt.Errorf("%w: %s is no longer trusted at pin %q; its connection was cut", ErrUntrusted, c.peer.Node, c.peer.Pin))
	}
}

// cutLocked closes c's socket and stops tracking it; t.mu is held.
func (t *Tracker) cutLocked(c *Conn, why error) {
	c.cut = why
	c.raw.Close()
	delete(t.conns, c)
}

// Close ends every listener and every tracked connection; later Add,
// Dial and Listen calls fail with an error wrapping net.ErrClosed.
func (t *Tracker) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for l := range t.listeners {
		if err := l.Listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
		delete(t.listeners, l)
	}
	for c := range t.conns {
		t.cutLocked(c, errClosed)
	}
	return errors.Join(errs...)
}

var errClosed = fmt.Errorf("transport closed: %w", net.ErrClosed)

// Add tracks a new socket and returns it as a Conn whose Read and Write go
// to raw until Layer puts something over it. After Close it closes raw and
// fails.
func (t *Tracker) Add(raw net.Conn) (*Conn, error) {
	c := &Conn{Conn: raw, raw: raw, t: t}
	if err := t.keep(raw, func() { t.conns[c] = struct{}{} }); err != nil {
		return nil, err
	}
	return c, nil
}

// keep runs add under the lock, unless the tracker is closed: then it
// closes what it was to add and fails.
func (t *Tracker) keep(closer io.Closer, add func()) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		closer.Close()
		return errClosed
	}
	add()
	return nil
}

// Dial checks that peer is trusted (at a pin other than "" if needPin),
// then connects to addr and tracks the socket; it returns the connection
// and the pin peer was trusted at. An untrusted peer is refused before
// anything is sent to addr, with an error wrapping ErrUntrusted. The
// connection is not bound to peer yet: the caller binds it once peer has
// proved who it is (or, on a transport that does not authenticate, at
// once, with the pin returned).
func (t *Tracker) Dial(ctx context.Context, peer NodeID, addr string, needPin bool) (*Conn, string, error) {
	t.mu.Lock()
	pin, ok := t.trusted[peer]
	closed := t.closed
	t.mu.Unlock()
	switch {
	case closed:
		return nil, "", errClosed
	case !ok:
		return nil, "", fmt.Errorf("%w: %s is not in the trusted set (not a live peer)", ErrUntrusted, peer)
	case needPin && pin == "":
		return nil, "", fmt.Errorf("%w: %s publishes no pin, so it cannot be authenticated", ErrUntrusted, peer)
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", err
	}
	c, err := t.Add(raw)
	return c, pin, err
}

// Listen listens on addr and returns a listener whose Accept tracks each
// connection and hands it to layer (which may be nil) before returning it.
// Closing the listener stops tracking it; Close closes it.
func (t *Tracker) Listen(ctx context.Context, addr string, layer func(*Conn)) (net.Listener, error) {
	var lc net.ListenConfig
	inner, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &listener{Listener: inner, t: t, layer: layer}
	if err := t.keep(inner, func() { t.listeners[l] = struct{}{} }); err != nil {
		return nil, err
	}
	return l, nil
}

type listener struct {
	net.Listener
	t     *Tracker
	layer func(*Conn)
}

func (l *listener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c, err := l.t.Add(raw)
	if err != nil {
		return nil, err
	}
	if l.layer != nil {
		l.layer(c)
	}
	return c, nil
}

func (l *listener) Close() error {
	l.t.mu.Lock()
	delete(l.t.listeners, l)
	l.t.mu.Unlock()
	return l.Listener.Close()
}

// Conn is a tracked connection. Read, Write and the deadlines go to the
// embedded net.Conn: the socket, or what Layer put over it (a *tls.Conn),
// after the handshake Layer gave, which runs once. Trust and Close cut it
// by closing the socket.
type Conn struct {
	net.Conn
	raw net.Conn
	t   *Tracker

	hsMu      sync.Mutex
	handshake func(ctx context.Context) error
	hsDone    bool
	hsErr     error
	hsOK      atomic.Bool // done and succeeded: Read and Write skip the lock

	// Under t.mu.
	peer  Peer
	bound bool
	cut   error
}

// Layer puts inner (which reads and writes the socket) over the socket, and
// a handshake that Handshake, the first Read or Write runs once. It is
// called before the connection is in use.
func (c *Conn) Layer(inner net.Conn, handshake func(ctx context.Context) error) {
	c.Conn = inner
	c.handshake = handshake
}

// Handshake runs the handshake Layer gave, once; later calls return its
// result. ctx bounds it (the handshake may bound itself further).
func (c *Conn) Handshake(ctx context.Context) error {
	if c.hsOK.Load() {
		return nil
	}
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if !c.hsDone {
		if c.handshake != nil {
			c.hsErr = c.wrap(c.handshake(ctx))
		}
		c.hsDone = true
		if c.hsErr != nil {
			c.raw.Close()
		} else {
			c.hsOK.Store(true)
		}
	}
	return c.hsErr
}

func (c *Conn) Read(b []byte) (int, error) {
	if err := c.Handshake(context.Background()); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	return n, c.wrap(err)
}

func (c *Conn) Write(b []byte) (int, error) {
	if err := c.Handshake(context.Background()); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	return n, c.wrap(err)
}

// Close closes the connection and stops tracking it.
func (c *Conn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	err := c.Conn.Close()
	if c.Conn != c.raw {
		c.raw.Close()
	}
	return err
}

// wrap adds why the connection was cut, if it was, to err.
func (c *Conn) wrap(err error) error {
	if err == nil {
		return nil
	}
	c.t.mu.Lock()
	cut := c.cut
	c.t.mu.Unlock()
	if cut == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", cut, err)
}

// Bind records that the connection belongs to peer, which proved pin: if
// the trusted set holds peer at that pin now. Otherwise it fails with an
// error wrapping ErrUntrusted (net.ErrClosed after a cut or Close).
func (c *Conn) Bind(peer NodeID, pin string) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return err
	}
	want, ok := c.t.trusted[peer]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is not in the trusted set (not a live peer)", ErrUntrusted, peer)
	case want != pin:
		return fmt.Errorf("%w: %s proved pin %q, but is trusted at %q", ErrUntrusted, peer, pin, want)
	}
	c.peer, c.bound = Peer{Node: peer, Pin: pin}, true
	return nil
}

// BindPin records that the connection belongs to the one node trusted at
// pin, and returns it; a pin no trusted node has (or "") fails with an
// error wrapping ErrUntrusted.
func (c *Conn) BindPin(pin string) (Peer, error) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return Peer{}, err
	}
	var found []NodeID
	for id, p := range c.t.trusted {
		if p == pin && pin != "" {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return Peer{}, fmt.Errorf("%w: no live peer publishes pin %q", ErrUntrusted, pin)
	case 1:
	default:
		return Peer{}, fmt.Errorf("%w: pin %q is published by %d peers (%v)", ErrUntrusted, pin, len(found), found)
	}
	c.peer, c.bound = Peer{Node: found[0], Pin: pin}, true
	return c.peer, nil
}

func (c *Conn) usableLocked() error {
	if c.cut != nil {
		return c.cut
	}
	if _, ok := c.t.conns[c]; !ok {
		return fmt.Errorf("connection closed: %w", net.ErrClosed)
	}
	return nil
}

// Peer returns the peer the connection is bound to: ok is false if it is
// bound to none yet, and err wraps ErrUntrusted once Trust cut it.
func (c *Conn) Peer() (p Peer, ok bool, err error) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.cut != nil {
		return Peer{}, false, c.cut
	}
	return c.peer, c.bound, nil
}

// Owns reports whether conn is a connection of this tracker's (whether
// it came from its Dial or one of its listeners), returning it as a *Conn.
func (t *Tracker) Owns(conn net.Conn) (*Conn, bool) {
	c, ok := conn.(*Conn)
	return c, ok && c.t == t
}
