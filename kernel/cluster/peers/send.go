package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// Kind is how a request to a peer failed, which decides what its caller
// may be told and whether it may have run there.
type Kind int

const (
	NoRoute   Kind = iota // not sent: the peer is not live, or not reachable in a way this node uses
	NoConnect             // not sent: no connection could be opened (or the peer refused this node)
	Broken                // written, and the connection failed before an answer: it may have run
	NoAnswer              // written, and no answer within the answer timeout: it may have run
	NotHeld               // answered: the peer does not hold the actor and ran nothing (NotHeldHeader; Forward only)
)

var kindNames = [...]string{"no_route", "connect", "broken", "timeout", "not_held"}

// errNotHeld is a NotHeld failure's cause.
var errNotHeld = errors.New("it does not hold the actor")

// String is the kind as a metric label.
func (k Kind) String() string { return kindNames[k] }

// Failure is a request to a peer that got no answer.
type Failure struct {
	Peer string
	Kind Kind
	Err  error
	// Untouched is set by Forward on a request it did not answer: not
	// sent, its body unread.
	Untouched bool
	// Refused: not sent, because the peer refused this node at the TLS
	// handshake (transport.ErrRefused), or closed a new authenticated
	// connection before a byte of the request was written. The peer read
	// nothing, and may trust this node once it listed its next heartbeat
	// (resend.go).
	Refused bool
}

func (f *Failure) Error() string {
	switch f.Kind {
	case NoRoute:
		return f.Err.Error()
	case NoConnect:
		if f.Refused {
			return fmt.Sprintf("node %s refused this node's certificate: %v", f.Peer, f.Err)
		}
		return fmt.Sprintf("node %s is not reachable: %v", f.Peer, f.Err)
	case NoAnswer:
		return fmt.Sprintf("node %s did not answer in time", f.Peer)
	case NotHeld:
		return fmt.Sprintf("node %s refused the request: %v", f.Peer, f.Err)
	}
	return fmt.Sprintf("node %s did not answer: %v", f.Peer, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// Sent reports whether the request may have reached the peer.
func (f *Failure) Sent() bool { return f.Kind == Broken || f.Kind == NoAnswer }

// Send sends req (its URL's path and query, its Host and headers, its
// body) to peer and returns the answer, whose Body the caller closes; a
// 101's Body is the connection itself (an io.ReadWriteCloser). Any error
// is a *Failure. The request is written at most once: a connection that
// fails before a byte of it was written is replaced once, one that fails
// after is never retried.
func (n *Network) Send(ctx context.Context, peer string, req *http.Request) (*http.Response, error) {
	p, err := n.pool(peer)
	if err != nil {
		return nil, &Failure{Peer: peer, Kind: NoRoute, Err: err}
	}
	for {
		c, err := p.get(ctx)
		if err != nil {
			return nil, &Failure{Peer: peer, Kind: NoConnect, Err: err, Refused: errors.Is(err, transport.ErrRefused)}
		}
		resp, written, err := n.exchange(ctx, p, c, req)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !written && c.reused && ctx.Err() == nil {
			continue // a kept-alive connection the peer had closed: nothing reached it
		}
		kind := Broken
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			kind = NoAnswer
		}
		if !written {
			// A new connection the peer accepted and closed before the
			// request left is taken for a refusal: one can close it so.
			return nil, &Failure{Peer: peer, Kind: NoConnect, Err: err, Refused: !c.reused && transport.Authenticates(p.route.tr)}
		}
		return nil, &Failure{Peer: peer, Kind: kind, Err: err}
	}
}

// exchange writes req into c and reads the answer's head. written says
// whether any byte of req may have left.
func (n *Network) exchange(ctx context.Context, p *pool, c *conn, req *http.Request) (_ *http.Response, written bool, _ error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	cw := &countingWriter{w: c.Conn}
	c.bw.Reset(cw)
	if err := req.Write(c.bw); err != nil {
		stop()
		return nil, cw.n > 0, err
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, cw.n > 0, err
	}
	c.SetReadDeadline(time.Now().Add(n.cfg.AnswerTimeout)) // a network deadline: wall time
	resp, err := readFinal(c.br, req)
	if err != nil {
		stop()
		return nil, true, err
	}
	c.SetReadDeadline(time.Time{})
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stop()
		resp.Body = &upgraded{conn: c}
		return resp, true, nil
	}
	resp.Body = &body{ReadCloser: resp.Body, c: c, p: p, stop: stop, keep: !resp.Close && !req.Close}
	return resp, true, nil
}

// countingWriter counts the bytes that reached the connection.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	m, err := c.w.Write(b)
	c.n += int64(m)
	return m, err
}

// body is an answer's body: read to its end, it gives the connection back
// to the pool; closed before, it closes the connection.
type body struct {
	io.ReadCloser
	c    *conn
	p    *pool
	stop func() bool
	keep bool

	once sync.Once
	eof  bool
}

func (b *body) Read(p []byte) (int, error) {
	m, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return m, err
}

func (b *body) Close() error {
	b.once.Do(func() {
		b.ReadCloser.Close()
		if b.stop() && b.eof && b.keep {
			b.p.put(b.c)
			return
		}
		b.c.Close()
	})
	return nil
}

// upgraded is a 101's connection, handed to the caller.
type upgraded struct{ conn *conn }

func (u *upgraded) Read(p []byte) (int, error)  { return u.conn.br.Read(p) }
func (u *upgraded) Write(p []byte) (int, error) { return u.conn.Conn.Write(p) }
func (u *upgraded) Close() error                { return u.conn.Close() }

// maxInterim bounds the interim answers read before the final one (as
// net/http's Transport does).
const maxInterim = 5

// readFinal reads the answer to req, past any interim (1xx) answer but a
// 101: a peer's server sends a 100 Continue when its handler reads the body
// of a request that asked for one (a client's Expect, forwarded), and that
// is not the answer.
func readFinal(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for range maxInterim {
		resp, err := http.ReadResponse(br, req)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, err
		}
	}
	return nil, fmt.Errorf("more than %d interim answers", maxInterim)
}
