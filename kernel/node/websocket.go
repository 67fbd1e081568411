package node

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The sockets themselves are kernel/node/websocket's; what follows is
// where they meet actors: the upgrade's on-websocket-open, the delivery of
// a socket's messages and close, the checks a delete brings, and the host
// functions.

// wsEvent is a WebSocket open, message or close for the actor.
type wsEvent struct {
	hook string // abi.ExportOnWebSocketOpen, Message or Close
	conn uint64
	code int // close only
}

// serveWebSocket runs on-websocket-open, then answers the upgrade: accepted,
// or closed with 1008 and the guest's reason. The socket then reads until
// it closes. Like serveActor, it answers nothing and reports held when k
// keeps the upgrade.
func (n *Node) serveWebSocket(w http.ResponseWriter, r *http.Request, c *class, name, path string, k *kept) (t tried, held bool) {
	s, err := n.ws.Reserve(n.actorKey(c, name))
	if err != nil {
		n.metrics.Refused(metrics.RefusedCapacity)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many WebSockets, retry", http.StatusServiceUnavailable)
		return tried{}, false
	}
	ev := &event{ctx: r.Context(), payload: []byte(path), reply: make(chan outcome, 1),
		ws: &wsEvent{hook: abi.ExportOnWebSocketOpen, conn: s.ID}, placed: true} // by ServeHTTP
	if err := n.deliver(r.Context(), c, name, ev); err != nil {
		n.ws.Release(s)
		if errors.Is(err, errQueueFull) { // an upgrade is not retried as a request would be: 503
			n.countRefusal(err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many events for this actor, retry", http.StatusServiceUnavailable)
			return tried{}, false
		}
		if to, ok := n.relocate(w, r, c, name, err, nil); ok {
			return tried{sentTo: to}, false
		}
		n.refuse(w, err)
		return tried{}, false
	}
	var out outcome
	select {
	case out = <-ev.reply:
	case <-r.Context().Done():
		out = <-ev.reply // a started open must be followed by its close
	}
	if out.skipped {
		n.ws.Release(s)
		if r.Context().Err() == nil { // the client is still there: a delete ran first
			n.metrics.Refused(metrics.RefusedAccess)
			http.Error(w, "unknown actor "+strconv.Quote(name), http.StatusNotFound)
		}
		return tried{}, false
	}
	if holder, ok := suspected(out.err); ok && r.Context().Err() == nil && k.hold(holder) {
		n.ws.Release(s)
		return tried{}, true
	}
	var elsewhere *placement.Elsewhere
	if errors.As(out.err, &elsewhere) && n.opts.Cluster != nil && r.Context().Err() == nil {
		// Taken by another node before it woke here: relayed there, once.
		n.ws.Release(s)
		n.forward(w, r, elsewhere)
		return tried{sentTo: elsewhere.Owner.Node}, false
	}
	if placement.NotHere(out.err) { // not run here, and no node to relay it to: 503, as a request gets
		n.ws.Release(s)
		n.refuse(w, out.err)
		return tried{}, false
	}
	if out.err != nil {
		reason := "refused"
		var f *failure
		if errors.As(out.err, &f) {
			reason = strings.TrimPrefix(f.public, "actor error: ")
		}
		n.ws.Refuse(w, r, s, reason)
		return tried{}, false
	}
	k.answered(tried{ran: true}) // kept no longer while the socket lasts
	n.ws.Show(s)
	n.ws.Serve(w, r, s, &wsActor{n: n, class: c.name, name: name})
	return tried{ran: true}, false
}

// wsActor delivers a socket's events to its actor (websocket.Actor), each
// of the class served as it arrives.
type wsActor struct {
	n     *Node
	class string
	name  string
}

// take is the class a socket's event takes, or nil when none runs it: a
// version dropped the class (which closes its sockets), or made it
// internal, where no outside event reaches an actor: the socket closes
// with 1008 (book ADR 0013).
func (t *wsActor) take(s *websocket.Socket) *class {
	c := t.n.class(t.class)
	switch {
	case c == nil:
		t.n.ws.CloseWith(s, websocket.ServiceRestart, "the class is no longer served")
	case c.access.Mode == access.Internal:
		t.n.ws.CloseWith(s, websocket.PolicyViolation, "the class is internal: outside requests are refused")
		return nil
	}
	return c
}

func (t *wsActor) Message(s *websocket.Socket, msg []byte) {
	n := t.n
	c := t.take(s)
	if c == nil {
		return
	}
	ev := &event{ctx: n.ctx, payload: msg, reply: make(chan outcome, 1),
		ws: &wsEvent{hook: abi.ExportOnWebSocketMessage, conn: s.ID}}
	err := n.deliverPatiently(c, t.name, ev, n.opts.WallClock)
	if placement.NotHere(err) || errors.Is(err, errHandingOver) { // the actor is no longer this node's (or not known to be, or soon)
		n.metrics.OwnerClosed(metrics.OwnerCloseEvent, 1)
		n.ws.CloseWith(s, websocket.ServiceRestart, "the actor moved, reconnect")
	} else if err != nil && !errors.Is(err, errStopping) { // stopping closes it with 1012
		n.ws.CloseWith(s, websocket.TryAgainLater, "actor overloaded")
	}
}

func (t *wsActor) Closed(s *websocket.Socket, code int, reason string) {
	c := t.take(s)
	if c == nil { // nothing runs its close
		return
	}
	ev := &event{ctx: t.n.ctx, payload: []byte(reason), reply: make(chan outcome, 1),
		ws: &wsEvent{hook: abi.ExportOnWebSocketClose, conn: s.ID, code: code}}
	if t.n.deliverPatiently(c, t.name, ev, 0) == nil {
		<-ev.reply
	}
}

// deliverPatiently retries a delivery refused for capacity or a full queue,
// for up to wait, or while the node runs if wait is 0 (up to the wall-clock
// limit once it stops).
func (n *Node) deliverPatiently(c *class, name string, ev *event, wait time.Duration) error {
	start := n.clock.Now()
	limit := cmp.Or(wait, n.opts.WallClock)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		err := n.deliver(n.ctx, c, name, ev)
		if err == nil || errors.Is(err, errStopping) || errors.Is(err, errHandingOver) || placement.NotHere(err) || n.ctx.Err() != nil ||
			((wait > 0 || n.stopping.Load()) && n.clock.Now().Sub(start) > limit) {
			return err
		}
		clock.Sleep(n.ctx, n.clock, delay)
	}
}

// isWSClose reports whether ev is a WebSocket close, which is delivered
// while the node stops too: the sockets it closes get their close events.
func (ev *event) isWSClose() bool { return ev.ws != nil && ev.ws.hook == abi.ExportOnWebSocketClose }

// closeSocketsOnDelete closes a deleted actor's sockets, open or being
// opened, with 1000 under existing and internal (book ADR 0028: not 1012, which
// tells a client to reconnect). An open class keeps them, as before: a
// message there creates the actor anew, as any outside request may.
func (a *actor) closeSocketsOnDelete() {
	if a.class.access.Mode == access.Open {
		return
	}
	a.node.ws.CloseActor(a.key, websocket.Normal, "actor deleted")
}

// wsActorGone reports whether a WebSocket event must not run because its
// actor, of a class whose access rule does not let outside requests create
// it, does not exist: a delete ran after the socket was checked. The actor
// calls it just before the event, so a delete queued ahead counts, and it
// creates nothing: a socket event never recreates a deleted actor of an
// existing or internal class (the book's security model).
func (a *actor) wsActorGone(c *class) bool {
	if c.access.AllowsCreate(a.addr.Name) || a.db != nil {
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
	sock := st.actor.node.ws.Lookup(st.actor.key, s[0])
	if sock == nil {
		s[0] = abi.SendUnknownConnection
		return
	}
	msg := make([]byte, 0, 1+len(data))
	s[0] = uint64(sock.Send(append(append(msg, byte(kind)), data...)))
}

// wsClose is ws_close(conn, code, reason_ptr, reason_len): the socket leaves
// connections() at once and closes once its queue is written.
func wsClose(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	code := int(uint32(s[1]))
	if code != 1000 && (code < 3000 || code > 4999) {
		faultf("ws_close: close code %d is neither 1000 nor in 3000-4999", code)
	}
	reason := string(read(mem, s[2], s[3]))
	if sock := st.actor.node.ws.Lookup(st.actor.key, s[0]); sock != nil {
		st.actor.node.ws.CloseWith(sock, code, reason)
	}
}
