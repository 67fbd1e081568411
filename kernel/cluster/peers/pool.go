package peers

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// maxIdle bounds the kept-alive connections to one peer.
const maxIdle = 64

// pool keeps the idle connections to one peer at one route. An idle
// connection is watched by a read of its own, so one the peer closed is
// dropped before it is used: a request is written only into a connection
// that was open an instant before.
type pool struct {
	peer        string
	route       route
	dialTimeout time.Duration

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// conn is one connection to a peer, with its buffers.
type conn struct {
	net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	reused  bool
	watched chan error // the idle watch's end: nil while in use
}

// aLongTimeAgo wakes a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// get returns an idle connection that is still open, or a new one.
func (p *pool) get(ctx context.Context) (*conn, error) {
	for {
		p.mu.Lock()
		if len(p.idle) == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		p.mu.Unlock()
		c.SetReadDeadline(aLongTimeAgo)
		err := <-c.watched
		c.watched = nil
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.SetReadDeadline(time.Time{})
			c.reused = true
			return c, nil
		}
		c.Close() // the peer closed it, or sent what it never should have
	}
	dctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	nc, err := p.route.tr.Dial(dctx, transport.NodeID(p.peer), p.route.addr)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, nil
}

// put keeps c for the next request, watched until then.
func (p *pool) put(c *conn) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdle {
		p.mu.Unlock()
		c.Close()
		return
	}
	c.watched = make(chan error, 1)
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	go func(c *conn, done chan error) {
		_, err := c.br.Peek(1)
		if err == nil {
			err = errors.New("the peer sent bytes on an idle connection")
		}
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) {
			p.drop(c)
		}
		done <- err
	}(c, c.watched)
}

// drop removes c from the idle list (if there) and closes it.
func (p *pool) drop(c *conn) {
	p.mu.Lock()
	for i, o := range p.idle {
		if o == c {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	c.Close()
}

// close closes every idle connection; connections in use close when done.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}
