package node

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// WebSockets belong to the node, not to the actor's instance: an actor
// hibernates with its sockets open, and the next message wakes it.
// coder/websocket serves them: it allows concurrent writes (the guest's sends
// and the host's closes and pings need no lock of ours), takes a context on
// every call, and closes over-long messages with 1009 itself.

const (
	wsCloseWait   = 5 * time.Second
	wsMaxReasonSz = 123 // a close frame's reason, in bytes
)

// wsEvent is a WebSocket open, message or close for the actor.
type wsEvent struct {
	hook string // abi.ExportOnWebSocketOpen, Message or Close
	conn uint64
	code int // close only
}

// socket is one client connection of an actor.
type socket struct {
	id    uint64
	key   string // the actor's
	class *class
	name  string
	conn  *websocket.Conn

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

// sockets is the node's registry of WebSockets.
type sockets struct {
	mu      sync.Mutex
	next    uint64
	all     map[uint64]*socket
	byActor map[string][]*socket // visible ones, oldest first
	count   map[string]int       // per actor, pending and closing ones too
	wg      sync.WaitGroup       // socket goroutines
}

var errSocketLimit = errors.New("too many WebSockets")

// reserve counts a new socket against the limits and returns its id.
func (n *Node) wsReserve(key string) (uint64, error) {
	r := &n.ws
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) >= n.opts.WebSocketsPerNode || r.count[key] >= n.opts.WebSocketsPerActor {
		return 0, errSocketLimit
	}
	if r.all == nil {
		r.all, r.byActor, r.count = map[uint64]*socket{}, map[string][]*socket{}, map[string]int{}
	}
	r.next++
	r.all[r.next] = nil
	r.count[key]++
	return r.next, nil
}

// wsRelease forgets a socket once its close event is delivered (or never will be).
func (n *Node) wsRelease(id uint64, key string) {
	r := &n.ws
	r.mu.Lock()
	delete(r.all, id)
	if r.count[key]--; r.count[key] <= 0 {
		delete(r.count, key)
	}
	r.mu.Unlock()
}

// wsHide removes a socket from its actor's connections.
func (n *Node) wsHide(s *socket) {
	r := &n.ws
	r.mu.Lock()
	list := slices.DeleteFunc(r.byActor[s.key], func(o *socket) bool { return o == s })
	if len(list) == 0 {
		delete(r.byActor, s.key)
	} else {
		r.byActor[s.key] = list
	}
	r.mu.Unlock()
}

// wsLookup finds a socket of the actor key, open or being opened (what
// on-websocket-open sends waits in the queue until the 101).
func (n *Node) wsLookup(key string, id uint64) *socket {
	n.ws.mu.Lock()
	defer n.ws.mu.Unlock()
	if s := n.ws.all[id]; s != nil && s.key == key {
		return s
	}
	return nil
}

// wsList appends the ids of the actor's open sockets, oldest first.
func (n *Node) wsList(key string, b []byte) []byte {
	n.ws.mu.Lock()
	defer n.ws.mu.Unlock()
	list := n.ws.byActor[key]
	b = abi.AppendU32(b, uint32(len(list)))
	for _, s := range list {
		b = binary.LittleEndian.AppendUint64(b, s.id)
	}
	return b
}

// isUpgrade reports whether r asks for a WebSocket.
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// serveWebSocket runs on-websocket-open, then answers the upgrade: accepted,
// or closed with 1008 and the guest's reason. The socket then reads until
// it closes.
func (n *Node) serveWebSocket(w http.ResponseWriter, r *http.Request, c *class, name, path string) {
	key := n.actorKey(c, name)
	id, err := n.wsReserve(key)
	if err != nil {
		n.metrics.Refused(metrics.RefusedCapacity)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many WebSockets, retry", http.StatusServiceUnavailable)
		return
	}
	s := &socket{id: id, key: key, class: c, name: name, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.lastRead.Store(n.clock.Now().UnixNano())
	n.ws.mu.Lock()
	n.ws.all[id] = s
	n.ws.mu.Unlock()
	ev := &event{ctx: r.Context(), payload: []byte(path), reply: make(chan outcome, 1),
		ws: &wsEvent{hook: abi.ExportOnWebSocketOpen, conn: id}, placed: true} // by ServeHTTP
	if err := n.deliver(r.Context(), c, name, ev); err != nil {
		n.wsRelease(id, key)
		if errors.Is(err, errQueueFull) { // an upgrade is not retried as a request would be: 503
			n.countRefusal(err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many events for this actor, retry", http.StatusServiceUnavailable)
			return
		}
		n.refuse(w, err)
		return
	}
	var out outcome
	select {
	case out = <-ev.reply:
	case <-r.Context().Done():
		out = <-ev.reply // a started open must be followed by its close
	}
	if out.skipped {
		n.wsRelease(id, key)
		if r.Context().Err() == nil { // the client is still there: a delete ran first
			n.metrics.Refused(metrics.RefusedAccess)
			http.Error(w, "unknown actor "+strconv.Quote(name), http.StatusNotFound)
		}
		return
	}
	// An accepted socket joins the actor's connections before the client
	// sees the 101, so every event after that sees it (a broadcast, say).
	if out.err == nil {
		s.mu.Lock()
		closed := s.closing // by on-websocket-open itself
		s.mu.Unlock()
		if !closed {
			n.ws.mu.Lock()
			n.ws.byActor[key] = append(n.ws.byActor[key], s)
			n.ws.mu.Unlock()
		}
	}
	// No Origin check: the book sets no origin rule, and the actor sees
	// only the path, so the host could not let it decide either.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		if out.err == nil { // the actor saw it open: it sees it close
			n.wsClosed(s, websocket.StatusAbnormalClosure, "")
		} else {
			n.wsRelease(id, key)
		}
		return
	}
	if out.err != nil {
		reason := "refused"
		var f *failure
		if errors.As(out.err, &f) {
			reason = strings.TrimPrefix(f.public, "actor error: ")
		}
		conn.Close(websocket.StatusPolicyViolation, truncate(reason, wsMaxReasonSz))
		n.wsRelease(id, key)
		return
	}
	conn.SetReadLimit(n.opts.WebSocketMaxMessage)
	n.ws.mu.Lock()
	s.conn = conn
	n.ws.mu.Unlock()
	n.ws.wg.Add(3)
	go n.wsWrite(s)
	go n.wsPing(s)
	n.wsRead(s)
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

// wsRead delivers the client's messages to the actor until the socket
// closes, then its close event.
func (n *Node) wsRead(s *socket) {
	defer n.ws.wg.Done()
	defer close(s.done)
	for {
		kind, data, err := s.conn.Read(n.ctx)
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
			n.wsClosed(s, code, reason)
			return
		}
		s.lastRead.Store(n.clock.Now().UnixNano())
		msg := make([]byte, 0, 1+len(data))
		msg = append(append(msg, byte(wsKind(kind))), data...)
		ev := &event{ctx: n.ctx, payload: msg, reply: make(chan outcome, 1),
			ws: &wsEvent{hook: abi.ExportOnWebSocketMessage, conn: s.id}}
		err = n.deliverPatiently(s, ev, n.opts.WallClock)
		if placement.NotHere(err) { // the actor is no longer this node's (or not known to be)
			n.wsCloseWith(s, websocket.StatusServiceRestart, "the actor moved, reconnect")
		} else if err != nil && !errors.Is(err, errStopping) { // stopping closes it with 1012
			n.wsCloseWith(s, websocket.StatusTryAgainLater, "actor overloaded")
		}
	}
}

func wsKind(t websocket.MessageType) abi.MessageKind {
	if t == websocket.MessageBinary {
		return abi.MessageBinary
	}
	return abi.MessageText
}

// deliverPatiently retries a delivery refused for capacity or a full queue,
// for up to wait, or while the node runs if wait is 0 (up to the wall-clock
// limit once it stops).
func (n *Node) deliverPatiently(s *socket, ev *event, wait time.Duration) error {
	start := n.clock.Now()
	limit := cmp.Or(wait, n.opts.WallClock)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		err := n.deliver(n.ctx, s.class, s.name, ev)
		if err == nil || errors.Is(err, errStopping) || placement.NotHere(err) || n.ctx.Err() != nil ||
			((wait > 0 || n.stopping.Load()) && n.clock.Now().Sub(start) > limit) {
			return err
		}
		clock.Sleep(n.ctx, n.clock, delay)
	}
}

// isWSClose reports whether ev is a WebSocket close, which is delivered
// while the node stops too: the sockets it closes get their close events.
func (ev *event) isWSClose() bool { return ev.ws != nil && ev.ws.hook == abi.ExportOnWebSocketClose }

// wsClosed hides a closed socket and delivers its close event; the socket
// counts against the limits until that is delivered.
func (n *Node) wsClosed(s *socket, code websocket.StatusCode, reason string) {
	n.wsHide(s)
	ev := &event{ctx: n.ctx, payload: []byte(reason), reply: make(chan outcome, 1),
		ws: &wsEvent{hook: abi.ExportOnWebSocketClose, conn: s.id, code: int(code)}}
	if n.deliverPatiently(s, ev, 0) == nil {
		<-ev.reply
	}
	n.wsRelease(s.id, s.key)
}

// wsCloseWith closes a socket once what is queued is written.
func (n *Node) wsCloseWith(s *socket, code websocket.StatusCode, reason string) {
	s.mu.Lock()
	if !s.closing {
		s.closing, s.code, s.reason = true, code, truncate(reason, wsMaxReasonSz)
	}
	s.mu.Unlock()
	n.wsHide(s)
	s.signal()
}

func (s *socket) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// send queues msg (kind byte + data) for the client, unless maxMessages or
// maxBytes are queued already (Options.WebSocketQueue, WebSocketQueueBytes).
func (s *socket) send(msg []byte, maxMessages, maxBytes int) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return abi.SendUnknownConnection
	case len(s.queue) >= maxMessages || s.queued+len(msg) > maxBytes:
		return abi.SendBackpressure
	}
	s.queue = append(s.queue, msg)
	s.queued += len(msg)
	s.signal()
	return abi.SendOK
}

// wsWrite writes queued messages in order, then the close frame.
func (n *Node) wsWrite(s *socket) {
	defer n.ws.wg.Done()
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
			ctx, cancel := clock.WithTimeout(n.ctx, n.clock, wsCloseWait)
			err := s.conn.Write(ctx, kind, msg[1:])
			cancel()
			if err != nil {
				s.conn.CloseNow()
				return
			}
		}
	}
}

// wsPing pings a client silent for WebSocketPingAfter and closes it if the
// pong does not come within WebSocketPongWait.
func (n *Node) wsPing(s *socket) {
	defer n.ws.wg.Done()
	for {
		silent := n.clock.Now().Sub(time.Unix(0, s.lastRead.Load()))
		if wait := n.opts.WebSocketPingAfter - silent; wait > 0 {
			t := n.clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		ctx, cancel := clock.WithTimeout(n.ctx, n.clock, n.opts.WebSocketPongWait)
		err := s.conn.Ping(ctx)
		cancel()
		if err != nil {
			s.conn.CloseNow()
			return
		}
		s.lastRead.Store(n.clock.Now().UnixNano())
	}
}

// closeSockets closes every socket with 1012 as the node stops, and waits
// for their goroutines.
func (n *Node) closeSockets() {
	n.wsCloseWhere(func(s *socket) bool { return s.conn != nil }, websocket.StatusServiceRestart, "node stopping")
	n.ws.wg.Wait()
}

// wsCloseWhere closes every socket for which match (called under n.ws.mu)
// holds, each once what is queued on it is written.
func (n *Node) wsCloseWhere(match func(*socket) bool, code websocket.StatusCode, reason string) {
	n.ws.mu.Lock()
	var found []*socket
	for _, s := range n.ws.all {
		if s != nil && match(s) {
			found = append(found, s)
		}
	}
	n.ws.mu.Unlock()
	for _, s := range found {
		n.wsCloseWith(s, code, reason)
	}
}

// closeSocketsOnDelete closes a deleted actor's sockets, open or being
// opened, with 1000 under existing and internal (book ADR 0028: not 1012, which
// tells a client to reconnect). An open class keeps them, as before: a
// message there creates the actor anew, as any outside request may.
func (a *actor) closeSocketsOnDelete() {
	if a.class.access.Mode == access.Open {
		return
	}
	a.node.wsCloseWhere(func(s *socket) bool { return s.key == a.key }, websocket.StatusNormalClosure, "actor deleted")
}

// wsActorGone reports whether a WebSocket event must not run because its
// actor, of a class whose access rule does not let outside requests create
// it, does not exist: a delete ran after the socket was checked. The actor
// calls it just before the event, so a delete queued ahead counts, and it
// creates nothing: a socket event never recreates a deleted actor of an
// existing or internal class (the book's security model).
func (a *actor) wsActorGone() bool {
	if a.class.access.AllowsCreate(a.addr.Name) || a.db != nil {
		return false
	}
	if a.node.hasDatabase(a.addr) {
		return false
	}
	a.deleted.Store(true) // nor does the next outside request find it resident
	return true
}

// wsSend is ws_send(conn, kind, ptr, len) -> SendError.
func wsSend(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	kind := abi.MessageKind(s[1])
	if kind != abi.MessageText && kind != abi.MessageBinary {
		faultf("ws_send: unknown message kind %d", kind)
	}
	data := read(mem, s[2], s[3])
	n := st.actor.node
	sock := n.wsLookup(st.actor.key, s[0])
	if sock == nil {
		s[0] = abi.SendUnknownConnection
		return
	}
	msg := make([]byte, 0, 1+len(data))
	s[0] = uint64(sock.send(append(append(msg, byte(kind)), data...), n.opts.WebSocketQueue, n.opts.WebSocketQueueBytes))
}

// wsClose is ws_close(conn, code, reason_ptr, reason_len): the socket leaves
// connections() at once and closes once its queue is written.
func wsClose(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	code := websocket.StatusCode(uint32(s[1]))
	if code != 1000 && (code < 3000 || code > 4999) {
		faultf("ws_close: close code %d is neither 1000 nor in 3000-4999", code)
	}
	reason := string(read(mem, s[2], s[3]))
	if sock := st.actor.node.wsLookup(st.actor.key, s[0]); sock != nil {
		st.actor.node.wsCloseWith(sock, code, reason)
	}
}
