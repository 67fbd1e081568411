package node

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/fetch"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// httpFetch serves http_fetch: one outbound HTTP request to a public
// address, synchronous within the event. Redirects are not followed: the
// guest gets the 3xx and may fetch its Location, which is checked anew.
// Stack: request ptr/len, out ptr/cap.
func httpFetch(ctx context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	n := st.actor.node
	raw := read(mem, s[0], s[1])
	if int64(len(raw)) > n.opts.FetchMaxBodyBytes+64<<10 {
		st.fetchFailed(mem, s, &fetch.Error{Kind: abi.FetchTooLarge, Msg: "the request is larger than the " + fetch.SizeText(n.opts.FetchMaxBodyBytes) + " limit"})
		return
	}
	var r abi.Reader
	r.Reset(raw)
	req := r.Request()
	step := time.Duration(r.U32()) * time.Millisecond
	if err := r.Done(); err != nil {
		faultf("http_fetch: malformed request: %v", err)
	}
	// The call ends a little before the event's wall clock does, so that
	// the guest lives to handle the timeout.
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-min(time.Second, n.opts.WallClock/10)))
		defer cancel()
	}
	var resp *abi.Response
	var err *fetch.Error
	st.actor.Wait(func() { resp, err = n.fetch.Do(ctx, req, step) })
	if err != nil {
		st.fetchFailed(mem, s, err)
		return
	}
	st.out = abi.AppendResponse(st.out[:0], resp)
	s[0] = st.result(mem, s[2], s[3], st.out, false)
}

func (st *eventState) fetchFailed(mem runtime.Memory, s []uint64, err *fetch.Error) {
	st.out = abi.AppendError(st.out[:0], uint8(err.Kind), err.Msg)
	s[0] = st.result(mem, s[2], s[3], st.out, true)
}
