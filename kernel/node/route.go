package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/fetch"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// Between nodes (book, Running a cluster): a request for an actor another
// node holds is forwarded to it once, a WebSocket upgrade relayed, and
// actors.call sent to it signed. What follows is the node's side of that;
// the connections are kernel/cluster/peers', the signatures
// kernel/cluster/callsign's.

// callErrorHeader carries a call-error kind (abi.CallErrorKind, decimal)
// on a node's answer to a signed call that did not reach, or did not
// finish in, the callee; the body is the error's text.
const callErrorHeader = "x-wasmkeep-call-error"

// forward sends an outside request for an actor peer holds on to it, once,
// and reports whether it answered w. A request another node forwarded
// already is not sent on again: 503, marked as not held here
// (peers.NotHeldHeader), since nothing of it ran. One placed by an owner
// hint that failed untouched (nothing sent, its body unread: the owner
// stopped since), or that the owner refused so marked (it released the
// actor since), is not answered: the hint is dropped and the caller
// places it again from the record.
func (n *Node) forward(w http.ResponseWriter, r *http.Request, e *placement.Elsewhere) bool {
	if r.Header.Get(peers.ForwardedHeader) != "" {
		w.Header().Set(peers.NotHeldHeader, "1")
		n.refuse(w, e)
		return true
	}
	_, f := n.forwardOnce(w, r, e)
	return f == nil || !f.Untouched
}

// forwardOnce sends r to e's node once (peers.Network.Forward) and
// returns the peer's status, or the failure, which answered w unless it
// is untouched; it counts the forward.
func (n *Node) forwardOnce(w http.ResponseWriter, r *http.Request, e *placement.Elsewhere) (int, *peers.Failure) {
	cm := n.opts.Cluster.Metrics
	if r.ContentLength > n.opts.MaxBodyBytes {
		// The holder would refuse it unread and close the connection while
		// the body is still being sent: a 503 here, for a request that can
		// never succeed. The answer is the holder's, given here.
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return http.StatusRequestEntityTooLarge, nil
	}
	kind := metrics.ForwardRequest
	if websocket.IsUpgrade(r) {
		kind = metrics.ForwardWebSocket
	}
	failure := ""
	status, f := n.opts.Cluster.Peers.Forward(w, r, e.Owner.Node, e.Owner.Hint)
	if f != nil {
		failure = f.Kind.String()
		n.log.Debug("forward failed", "node", e.Owner.Node, "err", f)
	}
	if f != nil && f.Kind == peers.NoConnect { // the book's second reason to keep the next ones (failover.go)
		n.unreachable.failed(e.Owner.Node, n.clock.Now(), n.opts.Cluster.Member.Lease.Settings())
	}
	if f != nil || status == http.StatusServiceUnavailable {
		// Not the holder, or not now: the next request for the actor reads
		// the record rather than an owner hint.
		n.forgetOwner(e.Addr)
	}
	cm.Forwarded(kind, failure)
	return status, f
}

// forwardUnrun forwards a request whose event did not run because another
// node took the actor between this node's placement and its acquire (two
// nodes woke a new actor at once): it is sent once to the holder, as if
// placed there, with its body from the event's payload. It reports
// whether it answered w.
func (n *Node) forwardUnrun(w http.ResponseWriter, r *http.Request, out outcome, payload []byte) bool {
	var e *placement.Elsewhere
	if n.opts.Cluster == nil || !errors.As(out.err, &e) || !withBody(r, payload) {
		return false
	}
	return n.forward(w, r, e)
}

// believesCalls reports whether a signed call arriving as r is taken for
// a peer's (then checked), not a client's: on the cluster listener, or on
// the public port with --cluster-plaintext accept.
func (n *Node) believesCalls(r *http.Request) bool {
	_, fromPeer := peers.FromPeer(r.Context())
	return fromPeer || n.opts.Cluster.PlainCalls
}

// serveCall serves a request that carries a call signature. It is a
// peer's actors.call only from an authenticated peer on the cluster
// listener, or on the public port with --cluster-plaintext accept: then
// it is checked, delivered with its caller and chain, and answered here
// (true). Anywhere else a valid signature is spent, so a copy can never be
// replayed where it would count, and the request is a client's (false).
func (n *Node) serveCall(w http.ResponseWriter, r *http.Request, c *class, route address.Route) bool {
	cl := n.opts.Cluster
	body, err := readBody(nil, r.Body, n.opts.MaxBodyBytes)
	if err != nil {
		http.Error(w, "reading the call's body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	target := r.URL.RequestURI()
	if !n.believesCalls(r) {
		if cl.Verifier != nil {
			cl.Verifier.Spend(r.Method, target, body, r.Header)
		}
		return false
	}
	if cl.Verifier == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "calls between nodes are off on this node: the cluster secret could not be used", http.StatusServiceUnavailable)
		return true
	}
	caller, chain, err := cl.Verifier.Verify(r.Method, target, body, r.Header)
	if err != nil {
		n.metrics.Refused(metrics.RefusedAccess)
		n.log.Warn("a call between nodes refused", "err", err, "path", r.URL.Path)
		if errors.Is(err, callsign.ErrReplayFull) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many calls between nodes, retry", http.StatusServiceUnavailable)
			return true
		}
		http.Error(w, "refused: "+err.Error(), http.StatusForbidden)
		return true
	}
	if callsign.Take(r.Header) { // believed: the signature covers it
		n.serveTake(w, r, c, route.Name, body)
		return true
	}
	req := abi.Request{Method: r.Method, Path: route.Rest, Body: body}
	if r.URL.RawQuery != "" {
		req.Path += "?" + r.URL.RawQuery
	}
	eachGuestHeader(r, true, func(name, value string) {
		req.Headers = append(req.Headers, abi.Header{Name: name, Value: value})
	})
	req.Headers = append(req.Headers, abi.Header{Name: callerHeader, Value: caller})
	res := n.callActor(r.Context(), c, route.Name, req, caller, chain, false)
	if res.failed {
		w.Header().Set(callErrorHeader, strconv.Itoa(int(res.kind)))
		http.Error(w, res.msg, http.StatusOK)
		return true
	}
	writeOutcome(w, outcome{resp: res.resp})
	return true
}

// callResult is how an actors.call ended: the callee's response, or a
// call-error.
type callResult struct {
	resp   abi.Response
	failed bool
	kind   abi.CallErrorKind
	msg    string
}

func callFailed(kind abi.CallErrorKind, msg string) callResult {
	return callResult{failed: true, kind: kind, msg: msg}
}

// callActor delivers a call to class c's actor name wherever it runs:
// here, or, when another node holds it and onward allows (a call from this
// node's actor, not one a peer sent), on that node as a signed call. req
// names its caller (callerHeader) for a delivery here.
func (n *Node) callActor(ctx context.Context, c *class, name string, req abi.Request, caller string, chain []string, onward bool) callResult {
	if slices.Contains(chain, n.actorKey(c, name)) {
		return callFailed(abi.CallReentrant, "calling "+c.name+"/"+name+" would re-enter an actor waiting in this call chain")
	}
	res, err := n.callHere(ctx, c, name, req, chain)
	var e *placement.Elsewhere
	if onward && errors.As(err, &e) && n.opts.Cluster != nil {
		return n.callPeer(ctx, e.Owner.Node, c, name, req, caller, chain)
	}
	return res
}

// callHere delivers a call through the callee's mailbox on this node and
// waits for its outcome; the error is deliver's, when it refused.
func (n *Node) callHere(ctx context.Context, c *class, name string, req abi.Request, chain []string) (callResult, error) {
	ev := &event{ctx: ctx, payload: abi.AppendRequest(nil, &req), reply: make(chan outcome, 1), chain: chain}
	if err := n.deliver(ctx, c, name, ev); err != nil {
		n.countRefusal(err)
		return callFailed(callErrorOf(ctx, err)), err
	}
	select {
	case out := <-ev.reply:
		switch {
		case out.skipped:
			return callFailed(abi.CallTimeout, "the caller's time ran out before the callee started"), nil
		case placement.NotHere(out.err): // not run: the actor went to another node meanwhile
			n.countRefusal(out.err)
			return callFailed(callErrorOf(ctx, out.err)), out.err
		case out.err != nil:
			var f *failure
			msg := "the callee failed"
			if errors.As(out.err, &f) {
				msg = f.public
			}
			return callFailed(abi.CallFailed, msg), nil
		case int64(len(out.resp.Body)) > n.opts.MaxBodyBytes:
			return callFailed(abi.CallTooLarge, "the response body is larger than the "+fetch.SizeText(n.opts.MaxBodyBytes)+" limit"), nil
		}
		return callResult{resp: out.resp}, nil
	case <-ctx.Done():
		return callFailed(abi.CallTimeout, "the callee did not answer within the event's wall-clock limit"), nil
	}
}

// callPeer sends a call to the node that holds the callee, signed with
// its caller and chain, and reads the callee's answer or call-error. A
// call that may have reached the peer is never sent again; one it refused
// at the handshake is, once, after this node's next heartbeat
// (peers.Network.Call).
func (n *Node) callPeer(ctx context.Context, peer string, c *class, name string, req abi.Request, caller string, chain []string) callResult {
	cl := n.opts.Cluster
	if cl.Signer == nil {
		return callFailed(abi.CallFailed, "calls between nodes are off: the cluster secret could not be read")
	}
	target := "/actor/" + c.name + "/" + address.EscapeName(name) + req.Path
	hr, err := http.NewRequestWithContext(ctx, req.Method, "http://wasmkeep"+address.EscapeTarget(target), bytes.NewReader(req.Body))
	if err != nil {
		return callFailed(abi.CallInvalidAddress, "the call's path: "+err.Error())
	}
	for _, h := range req.Headers {
		if strings.EqualFold(h.Name, "Host") {
			hr.Host = h.Value
			continue
		}
		if !callsign.HostOwned(h.Name) && !peers.HopByHop(h.Name) {
			hr.Header.Add(h.Name, h.Value)
		}
	}
	cl.Signer.Sign(callsign.Call{Target: peer, App: n.opts.App.String(), Method: req.Method, Path: hr.URL.RequestURI(), Body: req.Body, Caller: caller, Chain: chain}, hr.Header)
	resp, err := cl.Peers.Call(ctx, peer, hr)
	if err != nil {
		cl.Metrics.Forwarded(metrics.ForwardCall, failureKind(err))
		if ctx.Err() != nil {
			return callFailed(abi.CallTimeout, "the callee's node did not answer within the event's wall-clock limit")
		}
		return callFailed(abi.CallFailed, err.Error())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, n.opts.MaxBodyBytes+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return callFailed(abi.CallTimeout, "the callee's node did not answer within the event's wall-clock limit")
	case err != nil:
		return callFailed(abi.CallFailed, "node "+peer+" did not answer: "+err.Error())
	case int64(len(body)) > n.opts.MaxBodyBytes:
		return callFailed(abi.CallTooLarge, "the response body is larger than the "+fetch.SizeText(n.opts.MaxBodyBytes)+" limit")
	}
	cl.Metrics.Forwarded(metrics.ForwardCall, "")
	if k := resp.Header.Get(callErrorHeader); k != "" {
		kind, err := strconv.ParseUint(k, 10, 8)
		if err != nil {
			kind = uint64(abi.CallFailed)
		}
		return callFailed(abi.CallErrorKind(kind), strings.TrimSpace(string(body)))
	}
	if resp.StatusCode == http.StatusForbidden && resp.Header.Get(peers.NodeHeader) != "" {
		// Refused before the callee: a signature node b would not take.
		return callFailed(abi.CallFailed, "node "+peer+" refused the call: "+strings.TrimSpace(string(body)))
	}
	out := abi.Response{Status: resp.StatusCode, Body: body}
	for k, vs := range resp.Header {
		if peers.HopByHop(k) || callsign.HostOwned(k) {
			continue
		}
		for _, v := range vs {
			out.Headers = append(out.Headers, abi.Header{Name: k, Value: v})
		}
	}
	return callResult{resp: out}
}

// failureKind is a peers failure's kind, as a metric label.
func failureKind(err error) string {
	var f *peers.Failure
	if errors.As(err, &f) {
		return f.Kind.String()
	}
	return "other"
}

// LeaseLapsed is what the node does when its lease lapsed (every hold
// already dropped, and parked records, how many says parked, turned into
// pending releases): its WebSockets close with 1012 at once, before any
// other node may take their actors, and every resident actor is given up once its
// queued events ran, so none runs on a hold that is gone. Each is taken
// again, at a new generation, by its next event once the lease is valid
// again. It does not block.
func (n *Node) LeaseLapsed(parked int) {
	if c := n.opts.Cluster; c != nil {
		c.Metrics.ParkedReleased(metrics.ParkedLapse, parked)
	}
	n.metrics.OwnerClosed(metrics.OwnerCloseLapse, n.ws.CloseAll(websocket.ServiceRestart, "the node lost its lease, reconnect"))
	n.mu.Lock()
	for _, a := range n.actors {
		a.stop()
	}
	n.mu.Unlock()
}

// ownerSweep is how often the node checks that each actor with open
// sockets and no instance here is still placed here (book, Running a
// cluster: WebSockets).
const ownerSweep = time.Minute

// sweepOwners closes with 1012 the sockets of a room that hibernated here
// and was then taken by another node, until the node stops: a client that
// only listens is told within ownerSweep, one that sends at its next
// message.
func (n *Node) sweepOwners() {
	for clock.Sleep(n.ctx, n.clock, ownerSweep) == nil {
		parked := n.sweepParked()
		for _, key := range n.ws.Keys() {
			n.mu.Lock()
			resident := n.actors[key] != nil || parked[key] // a parked record names this node: nothing to read
			n.mu.Unlock()
			addr := addrOfKey(key)
			c := n.class(addr.Class)
			if resident || c == nil || addr.Tenant != n.opts.App.Tenant {
				continue
			}
			var e *placement.Elsewhere
			if errors.As(n.place(n.ctx, c, addr.Name), &e) {
				n.metrics.OwnerClosed(metrics.OwnerCloseSweep, n.ws.CloseActor(key, websocket.ServiceRestart, "the actor moved, reconnect"))
			}
		}
	}
}
