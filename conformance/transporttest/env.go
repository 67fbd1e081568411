package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// env is what a rule runs with: its nodes, each a transport listening on
// 127.0.0.1.
type env struct {
	ctx          context.Context
	opts         Options
	newTransport Factory
	nodes        []*node
	wg           sync.WaitGroup
}

// node is one transport, its listener and what the listener accepted.
type node struct {
	id   transport.NodeID
	tr   transport.Transport
	ln   net.Listener
	addr string
	// accepted gets each accepted connection once PeerOf has run on it,
	// as a server that reads at once would run its handshake.
	accepted chan accepted
	// ended is closed when Accept has returned an error.
	ended chan struct{}
}

type accepted struct {
	conn net.Conn
	peer transport.Peer
	err  error // PeerOf's
}

// node makes a transport, listens on 127.0.0.1 and accepts in the
// background.
func (e *env) node(name string) (*node, error) {
	tr, err := e.newTransport()
	if err != nil {
		return nil, fmt.Errorf("making node %s's transport: %w", name, err)
	}
	n := &node{id: transport.NodeID(name), tr: tr, accepted: make(chan accepted, 256), ended: make(chan struct{})}
	e.nodes = append(e.nodes, n)
	if n.ln, err = tr.Listen(e.ctx, "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("node %s: Listen 127.0.0.1:0: %w", name, err)
	}
	n.addr = n.ln.Addr().String()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(n.ended)
		for {
			c, err := n.ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				p, err := tr.PeerOf(c)
				n.accepted <- accepted{conn: c, peer: p, err: err}
			}()
		}
	}()
	return n, nil
}

// nodes makes a node per name.
func (e *env) makeNodes(names ...string) ([]*node, error) {
	var out []*node
	for _, name := range names {
		n, err := e.node(name)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// close closes every node's transport and waits for the accept loops: a
// Close that leaves a listener accepting fails the rule.
func (e *env) close() error {
	var errs []error
	for _, n := range e.nodes {
		if err := n.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: Close: %w", n.id, err))
		}
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.opts.Wait):
		errs = append(errs, fmt.Errorf("a listener still accepting %v after its transport's Close", e.opts.Wait))
	}
	for _, n := range e.nodes {
		for len(n.accepted) > 0 {
			(<-n.accepted).conn.Close()
		}
	}
	return errors.Join(errs...)
}

// trusting makes a node per name, each trusting all the others.
func (e *env) trusting(names ...string) ([]*node, error) {
	ns, err := e.makeNodes(names...)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		var others []*node
		for _, o := range ns {
			if o != n {
				others = append(others, o)
			}
		}
		n.trusts(others...)
	}
	return ns, nil
}

// trusts makes n trust exactly peers, each at its own pin.
func (n *node) trusts(peers ...*node) {
	set := map[transport.NodeID]string{}
	for _, p := range peers {
		set[p.id] = p.tr.Pin()
	}
	n.tr.Trust(set)
}

// dial dials from a to b at b's address.
func (e *env) dial(a, b *node) (net.Conn, error) {
	c, err := a.tr.Dial(e.ctx, b.id, b.addr)
	if err != nil {
		return nil, fmt.Errorf("%s: Dial %s at %s: %w", a.id, b.id, b.addr, err)
	}
	return c, nil
}

// acceptFrom waits for b's listener to hand over the connection whose far
// end is local (a dialed connection's LocalAddr); it closes the others.
func (e *env) acceptFrom(b *node, local net.Addr) (accepted, error) {
	timeout := time.After(e.opts.Wait)
	for {
		select {
		case a := <-b.accepted:
			if a.conn.RemoteAddr().String() == local.String() {
				return a, nil
			}
			a.conn.Close()
		case <-timeout:
			return accepted{}, fmt.Errorf("%s: no connection from %s accepted within %v", b.id, local, e.opts.Wait)
		case <-e.ctx.Done():
			return accepted{}, e.ctx.Err()
		}
	}
}

// pair dials from a to b and returns both ends: the dialed one and the one
// b accepted, whose PeerOf must have succeeded (or, declared
// unauthenticated, failed with ErrUnauthenticated).
func (e *env) pair(a, b *node) (dialed, acc net.Conn, err error) {
	dialed, err = e.dial(a, b)
	if err != nil {
		return nil, nil, err
	}
	got, err := e.acceptFrom(b, dialed.LocalAddr())
	if err != nil {
		dialed.Close()
		return nil, nil, err
	}
	if err := e.peerOK(b, got.err); err != nil {
		dialed.Close()
		got.conn.Close()
		return nil, nil, fmt.Errorf("%s: PeerOf the connection from %s: %w", b.id, a.id, err)
	}
	return dialed, got.conn, nil
}

// peerOK judges a PeerOf error: none on a transport that authenticates,
// ErrUnauthenticated on one that does not.
func (e *env) peerOK(n *node, err error) error {
	if e.opts.Unauthenticated {
		if !errors.Is(err, transport.ErrUnauthenticated) {
			return fmt.Errorf("got %v, want an error wrapping ErrUnauthenticated (declared unauthenticated)", err)
		}
		return nil
	}
	return err
}

// roundTrip sends msg from a to b and an answer back, within Wait.
func (e *env) roundTrip(what string, a, b net.Conn, msg []byte) error {
	deadline := time.Now().Add(e.opts.Wait)
	for _, c := range []net.Conn{a, b} {
		c.SetDeadline(deadline)
		defer c.SetDeadline(time.Time{})
	}
	answer := append([]byte("re: "), msg...)
	for _, step := range []struct {
		from, to net.Conn
		body     []byte
	}{{a, b, msg}, {b, a, answer}} {
		werr := make(chan error, 1)
		go func() {
			_, err := step.from.Write(step.body)
			werr <- err
		}()
		got := make([]byte, len(step.body))
		_, rerr := io.ReadFull(step.to, got)
		if err := <-werr; err != nil {
			return fmt.Errorf("%s: Write of %d bytes: %w", what, len(step.body), err)
		}
		if rerr != nil {
			return fmt.Errorf("%s: Read of %d bytes: %w", what, len(step.body), rerr)
		}
		if !bytes.Equal(got, step.body) {
			return fmt.Errorf("%s: %d bytes arrived that differ from those sent", what, len(got))
		}
	}
	return nil
}

// blockedRead starts a Read on c that nothing will feed: only a cut or a
// Close ends it. Its error comes on the channel.
func blockedRead(c net.Conn) <-chan error {
	ch := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		ch <- err
	}()
	return ch
}

// endedAll checks that several blocked Reads, named, each returned an error
// within Wait (one Wait for all).
func (e *env) endedAll(reads map[string]<-chan error) error {
	timeout := time.After(e.opts.Wait)
	var errs []error
	for what, read := range reads {
		select {
		case err := <-read:
			if err == nil {
				errs = append(errs, fmt.Errorf("%s: a Read returned data, want an error", what))
			}
		case <-timeout:
			errs = append(errs, fmt.Errorf("%s: a Read still blocked %v later, want an error at once", what, e.opts.Wait))
			timeout = closed
		}
	}
	return errors.Join(errs...)
}

// closed is a channel that is always ready: the bound, once passed.
var closed = func() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// nothingReached checks that nothing connected to l before now: a
// connection made now is the first l accepts. (The accept queue is
// first in, first out, so an earlier connection would come first.)
func (e *env) nothingReached(l net.Listener, what string) error {
	marker := []byte("the first connection")
	c, err := net.DialTimeout("tcp", l.Addr().String(), e.opts.Wait)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(marker); err != nil {
		return err
	}
	first, err := l.Accept()
	if err != nil {
		return err
	}
	defer first.Close()
	first.SetReadDeadline(time.Now().Add(e.opts.Wait))
	got := make([]byte, len(marker))
	if _, err := io.ReadFull(first, got); err != nil || !bytes.Equal(got, marker) {
		return fmt.Errorf("%s: something connected to %s before (read %q, %v)", what, l.Addr(), got, err)
	}
	return nil
}
