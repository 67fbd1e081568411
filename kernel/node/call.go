package node

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/fetch"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// callerHeader tells a callee which actor is calling; the host removes it
// from outside requests, so a callee can trust it. A call between nodes
// carries it signed (callsign).
const callerHeader = callsign.CallerHeader

// eachGuestHeader calls add with the request's Host, then each header a
// guest may see: never a host-owned one and, with dropHopByHop, no
// hop-by-hop one either (a request another node relays).
func eachGuestHeader(r *http.Request, dropHopByHop bool, add func(name, value string)) {
	if r.Host != "" {
		add("Host", r.Host)
	}
	for k, vs := range r.Header {
		if callsign.HostOwned(k) || dropHopByHop && peers.HopByHop(k) {
			continue
		}
		for _, v := range vs {
			add(k, v)
		}
	}
}

// actorCall serves actors.call: an HTTP-shaped request to class/name in the
// caller's tenant, delivered through the callee's mailbox while the caller's
// event waits. Stack: addr ptr/len, request ptr/len, out ptr/cap.
func actorCall(ctx context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	fail := func(kind abi.CallErrorKind, msg string) {
		st.out = abi.AppendError(st.out[:0], uint8(kind), msg)
		s[0] = st.result(mem, s[4], s[5], st.out, true)
	}
	addr, raw := string(read(mem, s[0], s[1])), read(mem, s[2], s[3])
	if st.actor.class.stateless { // there is no caller actor to name
		fail(abi.CallFailed, "the stateless component has no actors.call: it reaches actors over HTTP")
		return
	}
	n := st.actor.node
	c, name, err := n.parseCallAddress(addr)
	if err != nil {
		fail(abi.CallInvalidAddress, err.Error())
		return
	}
	if int64(len(raw)) > n.opts.MaxBodyBytes+64<<10 {
		fail(abi.CallTooLarge, "the request is larger than the "+fetch.SizeText(n.opts.MaxBodyBytes)+" limit")
		return
	}
	req, err := abi.DecodeRequest(raw)
	if err != nil {
		faultf("actor_call: malformed request: %v", err)
	}
	if int64(len(req.Body)) > n.opts.MaxBodyBytes {
		fail(abi.CallTooLarge, "the request body is larger than the "+fetch.SizeText(n.opts.MaxBodyBytes)+" limit")
		return
	}
	if req.Method == "" || !strings.HasPrefix(req.Path, "/") {
		fail(abi.CallInvalidAddress, "the request needs a method and a path starting with /")
		return
	}
	chain := append(slices.Clip(st.chain), st.actor.key)
	// The callee sees who calls, as the host says, never as the caller says.
	req.Headers = slices.DeleteFunc(req.Headers, func(h abi.Header) bool { return callsign.HostOwned(h.Name) })
	a := st.actor.addr
	caller := a.Tenant + "/" + a.Class + "/" + address.EscapeName(a.Name)
	req.Headers = append(req.Headers, abi.Header{Name: callerHeader, Value: caller})
	// The call ends a little before the caller's own wall clock does, so
	// that the caller lives to handle the timeout.
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-min(time.Second, n.opts.WallClock/10)))
		defer cancel()
	}
	var res callResult
	st.actor.Wait(func() { res = n.callActor(ctx, c, name, req, caller, chain, true) })
	if res.failed {
		fail(res.kind, res.msg)
		return
	}
	st.out = abi.AppendResponse(st.out[:0], &res.resp)
	s[0] = st.result(mem, s[4], s[5], st.out, false)
}

// parseCallAddress reads class/name (the name percent-encoded where it holds
// / or %) and checks both.
func (n *Node) parseCallAddress(addr string) (*class, string, error) {
	cls, rawName, ok := strings.Cut(addr, "/")
	if !ok {
		return nil, "", errors.New("the address must be class/name")
	}
	c := n.class(cls)
	if c == nil {
		return nil, "", errors.New("no class " + cls + " is served")
	}
	name, err := url.PathUnescape(rawName)
	if err != nil {
		return nil, "", errors.New("the name is not valid percent-encoding")
	}
	if err := address.CheckName(name); err != nil {
		return nil, "", err
	}
	return c, name, nil
}

// callErrorOf maps a delivery failure to a call-error.
func callErrorOf(ctx context.Context, err error) (abi.CallErrorKind, string) {
	switch {
	case ctx.Err() != nil:
		return abi.CallTimeout, "the caller's time ran out while waiting for the callee"
	case errors.Is(err, errQueueFull):
		return abi.CallFailed, "the callee's queue is full (429)"
	case errors.Is(err, errCapacity):
		return abi.CallFailed, "no resident capacity for the callee (503)"
	default:
		return abi.CallFailed, err.Error()
	}
}
