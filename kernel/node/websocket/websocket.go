// Package websocket is the WebSocket mechanics of a node: sockets belong to
// the node, not to the actor's instance (an actor hibernates with its
// sockets open, and the next message wakes it). It accepts an upgrade,
// counts sockets against the limits per actor and per node, queues what
// the actor sends with backpressure, pings a silent client and closes one
// whose pong does not come (on the node's clock), and closes with the
// book's codes. Delivering a socket's events to its actor is the node's,
// behind Actor.
//
// coder/websocket serves them: it allows concurrent writes (the guest's
// sends and the host's closes and pings need no lock of ours), takes a
// context on every call, and closes over-long messages with 1009 itself.
package websocket

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// Close codes the node chooses.
const (
	Normal          = int(websocket.StatusNormalClosure) // 1000: the actor is deleted
	Abnormal        = int(websocket.StatusAbnormalClosure)
	PolicyViolation = int(websocket.StatusPolicyViolation) // 1008: the class is internal
	ServiceRestart  = int(websocket.StatusServiceRestart)  // 1012: the node stops, or the actor moved: reconnect
	TryAgainLater   = int(websocket.StatusTryAgainLater)   // 1013: the actor is overloaded
	InternalError   = int(websocket.StatusInternalError)   // 1011: the actor cannot run here as configured
)

const (
	closeWait   = 5 * time.Second
	maxReasonSz = 123 // a close frame's reason, in bytes
)

// Options are the limits and timers of a node's sockets.
type Options struct {
	PerActor, PerNode int           // open sockets; more are refused
	PingAfter         time.Duration // of client silence before a ping
	PongWait          time.Duration // for the pong before the socket closes
	MaxMessage        int64         // bytes per client message; larger closes the socket with 1009
	Queue, QueueBytes int           // messages and bytes queued per socket before a send gets backpressure
	// Freed is called with a socket's actor once its slot is freed
	// (Release), outside the hub's lock; nil for none.
	Freed func(key string)
}

// Actor is how a socket's events reach the actor behind it.
type Actor interface {
	// Message delivers a client's message (kind byte + data). If it cannot,
	// it closes the socket (CloseWith) as it sees fit.
	Message(s *Socket, msg []byte)
	// Closed delivers the socket's close event and returns once it ran, or
	// once it never will.
	Closed(s *Socket, code int, reason string)
}

// Socket is one client connection of an actor.
type Socket struct {
	ID  uint64
	Key string // the actor's
	hub *Hub

	conn    *websocket.Conn
	mu      sync.Mutex
	queue   [][]byte // kind byte + data, in send order
	queued  int      // bytes in queue
	wake    chan struct{}
	closing bool // the host or the actor closes it: no more sends
	code    websocket.StatusCode
	reason  string

	lastRead atomic.Int64  // unix nanos of the client's last frame
	done     chan struct{} // closed when the reader ends
}

// Hub is a node's registry of sockets.
type Hub struct {
	opts  Options
	ctx   context.Context // the node's: ends reads, writes and pings when it stops
	clock clock.Clock

	mu      sync.Mutex
	next    uint64
	all     map[uint64]*Socket
	byActor map[string][]*Socket // visible ones, oldest first
	count   map[string]int       // per actor, pending and closing ones too
	wg      sync.WaitGroup       // socket goroutines
}

// NewHub returns a node's registry; ctx ends with the node.
func NewHub(ctx context.Context, clk clock.Clock, o Options) *Hub {
	return &Hub{opts: o, ctx: ctx, clock: clk,
		all: map[uint64]*Socket{}, byActor: map[string][]*Socket{}, count: map[string]int{}}
}

// ErrLimit refuses a socket over the limits per actor or per node.
var ErrLimit = errors.New("too many WebSockets")

// IsUpgrade reports whether r asks for a WebSocket.
func IsUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// Reserve counts a new socket of the actor key against the limits. It is
// found by Lookup (what on-websocket-open sends waits in its queue until
// the 101) but is not among the actor's connections until Show.
func (h *Hub) Reserve(key string) (*Socket, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.all) >= h.opts.PerNode || h.count[key] >= h.opts.PerActor {
		return nil, ErrLimit
	}
	h.next++
	s := &Socket{ID: h.next, Key: key, hub: h, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.lastRead.Store(h.clock.Now().UnixNano())
	h.all[s.ID] = s
	h.count[key]++
	return s, nil
}

// Release forgets a socket once its close event is delivered (or never
// will be).
func (h *Hub) Release(s *Socket) {
	h.mu.Lock()
	delete(h.all, s.ID)
	if h.count[s.Key]--; h.count[s.Key] <= 0 {
		delete(h.count, s.Key)
	}
	h.mu.Unlock()
	if h.opts.Freed != nil {
		h.opts.Freed(s.Key)
	}
}

// Show makes an accepted socket one of its actor's connections, before
// the client sees the 101, so every event after that sees it (a
// broadcast, say); unless on-websocket-open closed it already.
func (h *Hub) Show(s *Socket) {
	s.mu.Lock()
	closed := s.closing
	s.mu.Unlock()
	if !closed {
		h.mu.Lock()
		h.byActor[s.Key] = append(h.byActor[s.Key], s)
		h.mu.Unlock()
	}
}

// hide removes a socket from its actor's connections.
func (h *Hub) hide(s *Socket) {
	h.mu.Lock()
	list := slices.DeleteFunc(h.byActor[s.Key], func(o *Socket) bool { return o == s })
	if len(list) == 0 {
		delete(h.byActor, s.Key)
	} else {
		h.byActor[s.Key] = list
	}
	h.mu.Unlock()
}

// Lookup finds a socket of the actor key, open or being opened.
func (h *Hub) Lookup(key string, id uint64) *Socket {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.all[id]; s != nil && s.Key == key {
		return s
	}
	return nil
}

// List appends the ids of the actor's open sockets, oldest first, as
// ws_list answers them.
func (h *Hub) List(key string, b []byte) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.byActor[key]
	b = abi.AppendU32(b, uint32(len(list)))
	for _, s := range list {
		b = binary.LittleEndian.AppendUint64(b, s.ID)
	}
	return b
}

// Len is the number of registered sockets, those awaiting their close
// event included.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

// Serve answers the upgrade of a reserved socket whose on-websocket-open
// accepted it; the socket then reads until it closes, handing its messages
// and its close to a.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, s *Socket, a Actor) {
	conn, err := accept(w, r)
	if err != nil { // the actor saw it open: it sees it close
		h.closed(s, a, Abnormal, "")
		return
	}
	conn.SetReadLimit(h.opts.MaxMessage)
	h.mu.Lock()
	s.conn = conn
	h.mu.Unlock()
	h.wg.Add(3)
	go h.write(s)
	go h.ping(s)
	h.read(s, a)
}

// Refuse answers the upgrade of a reserved socket whose on-websocket-open
// refused it: closed with 1008 and reason, and forgotten.
func (h *Hub) Refuse(w http.ResponseWriter, r *http.Request, s *Socket, reason string) {
	if conn, err := accept(w, r); err == nil {
		conn.Close(websocket.StatusPolicyViolation, truncate(reason, maxReasonSz))
	}
	h.Release(s)
}

func accept(w http.ResponseWriter, r *http.Request) (*websocket.Conn, error) {
	// No Origin check: the book sets no origin rule, and the actor sees
	// only the path, so the host could not let it decide either.
	return websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
}

// truncate cuts s to at most max bytes, on a rune boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && s[max]&0xc0 == 0x80 {
		max--
	}
	return s[:max]
}

// read hands the client's messages to the actor until the socket closes,
// then its close.
func (h *Hub) read(s *Socket, a Actor) {
	defer h.wg.Done()
	defer close(s.done)
	for {
		kind, data, err := s.conn.Read(h.ctx)
		if err != nil {
			code, reason := websocket.CloseStatus(err), ""
			var ce websocket.CloseError
			switch {
			case errors.As(err, &ce):
				reason = ce.Reason
			case errors.Is(err, websocket.ErrMessageTooBig):
				code = websocket.StatusMessageTooBig
			default:
				code = websocket.StatusAbnormalClosure
			}
			s.mu.Lock()
			if s.closing { // the host or the actor closed it: its code
				code, reason = s.code, s.reason
			}
			s.closing = true
			s.mu.Unlock()
			s.signal()
			h.closed(s, a, int(code), reason)
			return
		}
		s.lastRead.Store(h.clock.Now().UnixNano())
		msg := make([]byte, 0, 1+len(data))
		a.Message(s, append(append(msg, byte(messageKind(kind))), data...))
	}
}

func messageKind(t websocket.MessageType) abi.MessageKind {
	if t == websocket.MessageBinary {
		return abi.MessageBinary
	}
	return abi.MessageText
}

// closed hides a closed socket and has its close event delivered; the
// socket counts against the limits until that is done.
func (h *Hub) closed(s *Socket, a Actor, code int, reason string) {
	h.hide(s)
	a.Closed(s, code, reason)
	h.Release(s)
}

// CloseWith closes a socket once what is queued is written: it leaves its
// actor's connections at once.
func (h *Hub) CloseWith(s *Socket, code int, reason string) { h.closeOnce(s, code, reason) }

// closeOnce is CloseWith, and reports whether the socket was not closing
// already.
func (h *Hub) closeOnce(s *Socket, code int, reason string) bool {
	s.mu.Lock()
	first := !s.closing
	if first {
		s.closing, s.code, s.reason = true, websocket.StatusCode(code), truncate(reason, maxReasonSz)
	}
	s.mu.Unlock()
	h.hide(s)
	s.signal()
	return first
}

func (s *Socket) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Send queues msg (kind byte + data) for the client, unless the queue is
// full (Options.Queue, QueueBytes): an abi.Send* result.
func (s *Socket) Send(msg []byte) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return abi.SendUnknownConnection
	case len(s.queue) >= s.hub.opts.Queue || s.queued+len(msg) > s.hub.opts.QueueBytes:
		return abi.SendBackpressure
	}
	s.queue = append(s.queue, msg)
	s.queued += len(msg)
	s.signal()
	return abi.SendOK
}

// write writes queued messages in order, then the close frame.
func (h *Hub) write(s *Socket) {
	defer h.wg.Done()
	for range s.wake {
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				closing, code, reason := s.closing, s.code, s.reason
				s.mu.Unlock()
				if closing {
					if code != 0 {
						s.conn.Close(code, reason)
					}
					return
				}
				break
			}
			msg := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			s.queued -= len(msg)
			s.mu.Unlock()
			kind := websocket.MessageText
			if abi.MessageKind(msg[0]) == abi.MessageBinary {
				kind = websocket.MessageBinary
			}
			ctx, cancel := clock.WithTimeout(h.ctx, h.clock, closeWait)
			err := s.conn.Write(ctx, kind, msg[1:])
			cancel()
			if err != nil {
				s.conn.CloseNow()
				return
			}
		}
	}
}

// ping pings a client silent for PingAfter and closes it if the pong does
// not come within PongWait.
func (h *Hub) ping(s *Socket) {
	defer h.wg.Done()
	for {
		silent := h.clock.Now().Sub(time.Unix(0, s.lastRead.Load()))
		if wait := h.opts.PingAfter - silent; wait > 0 {
			t := h.clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		ctx, cancel := clock.WithTimeout(h.ctx, h.clock, h.opts.PongWait)
		err := s.conn.Ping(ctx)
		cancel()
		if err != nil {
			s.conn.CloseNow()
			return
		}
		s.lastRead.Store(h.clock.Now().UnixNano())
	}
}

// Shutdown closes every open socket with 1012 as the node stops, and waits
// for their goroutines.
func (h *Hub) Shutdown() {
	h.CloseAll(ServiceRestart, "node stopping")
	h.wg.Wait()
}

// CloseAll closes every open socket and says how many it closed (not
// those closing already).
func (h *Hub) CloseAll(code int, reason string) int {
	return h.closeWhere(func(s *Socket) bool { return s.conn != nil }, code, reason)
}

// Keys lists the actors that have open sockets.
func (h *Hub) Keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.byActor))
	for k, ss := range h.byActor {
		if len(ss) > 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// CloseActor closes every socket of the actor key, open or being opened,
// each once what is queued on it is written, and says how many it closed
// (not those closing already).
func (h *Hub) CloseActor(key string, code int, reason string) int {
	return h.closeWhere(func(s *Socket) bool { return s.Key == key }, code, reason)
}

// closeWhere closes every socket for which match (called under h.mu)
// holds, and says how many were not closing already.
func (h *Hub) closeWhere(match func(*Socket) bool, code int, reason string) int {
	h.mu.Lock()
	var found []*Socket
	for _, s := range h.all {
		if match(s) {
			found = append(found, s)
		}
	}
	h.mu.Unlock()
	closed := 0
	for _, s := range found {
		if h.closeOnce(s, code, reason) {
			closed++
		}
	}
	return closed
}

// Open reports whether the actor key has a socket open and not closing
// (one of its connections).
func (h *Hub) Open(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byActor[key]) > 0
}

// Closing reports whether the actor key has a socket closing, whose close
// event is still to be delivered.
func (h *Hub) Closing(key string) bool {
	h.mu.Lock()
	var of []*Socket
	for _, s := range h.all {
		if s.Key == key {
			of = append(of, s)
		}
	}
	h.mu.Unlock()
	for _, s := range of {
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			return true
		}
	}
	return false
}

// Has reports whether the actor key has a socket: open, being opened or
// closing.
func (h *Hub) Has(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.all {
		if s.Key == key {
			return true
		}
	}
	return false
}
