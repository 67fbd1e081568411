package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cputime"
	"github.com/wasmkeep/wasmkeep/kernel/node/fetch"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// eventState is what the host functions of one running event work on. Each
// actor keeps one and resets it per event, so host calls allocate nothing of
// their own.
type eventState struct {
	actor *actor
	watch *cputime.Watch
	// cancel ends the event's ctx, and its guest calls' with it (guest),
	// once the event has ended (runEvent).
	cancel    context.CancelFunc
	pending   []byte // payload awaiting take_pending
	hookErr   string
	isRequest bool
	chain     []string // the actors waiting on this event, through calls
	// deleteAtEnd: delete-self was called; deleted: the database is gone
	// (delete-self-durable), so storage calls are refused.
	deleteAtEnd, deleted bool
	// operatorMark: the operator's delete the event carries out
	// (deletes.Request.Marker), recorded in the reset's empty database.
	operatorMark string
	// unheld: the actor's replication ended in the event (an exec-durable
	// or a delete's reset whose upload failed): storage calls are refused,
	// and the actor is given up when the event ends.
	unheld       bool
	alarmTouched bool           // set-alarm or clear-alarm ran: the timer follows the database
	stale        *staleDelivery // an alarm delivered for a time the committed alarm does not hold
	created      bool           // an alarm delivery opened the actor's database here, restored from the bucket (openDB)
	responded    bool
	resp         abi.Response // copied out of guest memory by respond
	out          []byte       // encode buffer for host results
	rows         abi.RowsWriter
	params       []abi.Value
	reader       abi.Reader
}

type stateKey struct{}

// stateOf is the event ctx belongs to; nil outside events (a module's start
// run to pre-initialise it: preinit.go).
func stateOf(ctx context.Context) *eventState {
	st, _ := ctx.Value(stateKey{}).(*eventState)
	return st
}

// guestFault is a host function refusing a bad argument: the guest call
// fails (the engine turns the panic into the call's error).
type guestFault struct{ msg string }

func (e *guestFault) Error() string { return e.msg }

func faultf(format string, args ...any) { panic(&guestFault{fmt.Sprintf(format, args...)}) }

func read(mem runtime.Memory, ptr, n uint64) []byte {
	b, ok := mem.Read(uint32(ptr), uint32(n))
	if !ok {
		faultf("pointer %d+%d is outside the guest's memory (%d bytes)", uint32(ptr), uint32(n), mem.Size())
	}
	return b
}

// result hands a payload back through an output buffer (docs/abi.md,
// section 3) and returns the i32 n for the stack.
func (st *eventState) result(mem runtime.Memory, outPtr, outCap uint64, payload []byte, failed bool) uint64 {
	n := int32(len(payload))
	st.pending = nil // a new payload replaces any pending one
	if uint32(len(payload)) <= uint32(outCap) {
		if !mem.Write(uint32(outPtr), payload) {
			faultf("output buffer %d+%d is outside the guest's memory", uint32(outPtr), uint32(outCap))
		}
	} else {
		st.pending = payload
	}
	if failed {
		n = -n
	}
	return uint64(uint32(n))
}

var (
	i32 = runtime.I32
	i64 = runtime.I64
)

func sig(params []runtime.ValueType, results ...runtime.ValueType) runtime.Signature {
	return runtime.Signature{Params: params, Results: results}
}

func types(ts ...runtime.ValueType) []runtime.ValueType { return ts }

// hostFunc wraps a host function so that its time is not charged to the
// guest's CPU budget (only to the event's cap on all CPU), even while it
// runs, and so that each call is a point where an event that uses much CPU
// waits for a turn of the cores, or gives its turn to a waiting event
// (fair.Sched.Check).
func hostFunc(name string, s runtime.Signature, f func(ctx context.Context, st *eventState, mem runtime.Memory, stack []uint64)) runtime.HostFunction {
	return runtime.HostFunction{Name: name, Signature: s, Func: func(ctx context.Context, mem runtime.Memory, stack []uint64) {
		st := stateOf(ctx)
		if st == nil {
			faultf("%s.%s called while the module was pre-initialised: a module whose start calls the host cannot be", abi.HostModule, name)
		}
		since := st.watch.EnterHost()
		defer st.watch.LeaveHost(since)
		st.actor.node.cpu.Check(&st.actor.share, since) // where a guest that loops is rationed
		f(ctx, st, mem, stack)
	}}
}

// withOutput wraps a host function whose output buffer (docs/abi.md,
// section 3) is stack[at], stack[at+1]. The whole buffer is checked before
// the function acts, so that a range reaching past memory traps even where
// the payload would fit, and a trap never follows a side effect (a row
// committed, a callee called, a request sent). Every such function is
// registered through it; the functions themselves read their inputs before
// they act.
func withOutput(at int, f func(ctx context.Context, st *eventState, mem runtime.Memory, stack []uint64)) func(ctx context.Context, st *eventState, mem runtime.Memory, stack []uint64) {
	return func(ctx context.Context, st *eventState, mem runtime.Memory, s []uint64) {
		if _, ok := mem.Read(uint32(s[at]), uint32(s[at+1])); !ok {
			faultf("output buffer %d+%d is outside the guest's memory (%d bytes)", uint32(s[at]), uint32(s[at+1]), mem.Size())
		}
		f(ctx, st, mem, s)
	}
}

// hostFunctions is the wasmkeep module every guest may import.
func hostFunctions() map[string]runtime.HostFunction {
	fs := []runtime.HostFunction{
		hostFunc(abi.HostTakePending, sig(types(i32), i32), func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			if st.pending == nil {
				s[0] = uint64(uint32(0xffffffff))
				return
			}
			if !mem.Write(uint32(s[0]), st.pending) {
				faultf("take_pending: buffer %d+%d is outside the guest's memory", uint32(s[0]), len(st.pending))
			}
			s[0] = uint64(len(st.pending))
			st.pending = nil
		}),
		hostFunc(abi.HostHookError, sig(types(i32, i32)), func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			msg := read(mem, s[0], s[1])
			if len(msg) > 4096 {
				msg = msg[:4096]
			}
			st.hookErr = string(msg)
		}),
		hostFunc(abi.HostRespond, sig(types(i32, i32), i32), func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			s[0] = uint64(st.respond(read(mem, s[0], s[1])))
		}),
		hostFunc(abi.HostSQLExec, sig(types(i32, i32, i32, i32, i32, i32, i32), i32), withOutput(5, func(ctx context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			flags := uint32(s[4])
			if flags&^abi.ExecDurable != 0 {
				faultf("sql_exec: unknown flags %#x", flags)
			}
			sql, params := st.statement(mem, s)
			if err := st.storageRefused(); err != nil {
				s[0] = st.sqlError(mem, s[5], s[6], err)
				return
			}
			durable := flags&abi.ExecDurable != 0
			var n int64
			var err error
			exec := func() {
				n, err = st.actor.db.Exec(ctx, sql, params, storage.ExecOptions{Durable: durable})
				if err == nil && durable {
					err = st.shipDurable(ctx)
				}
			}
			if durable { // an fsync, and with a bucket an upload
				st.actor.Wait(exec)
			} else {
				exec()
			}
			if err != nil {
				s[0] = st.sqlError(mem, s[5], s[6], err)
				return
			}
			st.out = binary.LittleEndian.AppendUint64(st.out[:0], uint64(n))
			s[0] = st.result(mem, s[5], s[6], st.out, false)
		})),
		hostFunc(abi.HostSQLQuery, sig(types(i32, i32, i32, i32, i32, i32), i32), withOutput(4, func(ctx context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			sql, params := st.statement(mem, s)
			if err := st.storageRefused(); err != nil {
				s[0] = st.sqlError(mem, s[4], s[5], err)
				return
			}
			st.rows.Buf = st.out[:0]
			err := st.actor.db.Query(ctx, sql, params, &st.rows)
			st.out = st.rows.Buf[:0]
			if err != nil {
				s[0] = st.sqlError(mem, s[4], s[5], err)
				return
			}
			s[0] = st.result(mem, s[4], s[5], st.rows.Buf, false)
		})),
		hostFunc(abi.HostSelfAddress, sig(types(i32, i32), i32), withOutput(0, func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			st.actorOnly("self_address")
			st.out = abi.AppendAddress(st.out[:0], st.actor.addr)
			s[0] = st.result(mem, s[0], s[1], st.out, false)
		})),
		hostFunc(abi.HostEnvGet, sig(types(i32, i32, i32, i32), i32), withOutput(2, func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			v, ok := st.actor.class.env[string(read(mem, s[0], s[1]))]
			if !ok {
				st.out = append(st.out[:0], 0) // not set
				s[0] = st.result(mem, s[2], s[3], st.out, true)
				return
			}
			st.out = append(st.out[:0], v...)
			s[0] = st.result(mem, s[2], s[3], st.out, false)
		})),
		hostFunc(abi.HostWSSend, sig(types(i64, i32, i32, i32), i32), wsSend),
		hostFunc(abi.HostWSList, sig(types(i32, i32), i32), withOutput(0, func(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
			st.out = st.actor.node.ws.List(st.actor.key, st.out[:0])
			s[0] = st.result(mem, s[0], s[1], st.out, false)
		})),
		hostFunc(abi.HostDeleteSelf, sig(types(i32, i32, i32), i32), withOutput(1, deleteSelf)),
		hostFunc(abi.HostActorCall, sig(types(i32, i32, i32, i32, i32, i32), i32), withOutput(4, actorCall)),
		hostFunc(abi.HostHTTPFetch, sig(types(i32, i32, i32, i32), i32), withOutput(2, httpFetch)),
		hostFunc(abi.HostAlarmSet, sig(types(i64)), alarmSet),
		hostFunc(abi.HostAlarmGet, sig(nil, i64), alarmGet),
		hostFunc(abi.HostAlarmClear, sig(nil), alarmClear),
		hostFunc(abi.HostWSClose, sig(types(i64, i32, i32, i32)), wsClose),
	}
	m := make(map[string]runtime.HostFunction, len(fs))
	for _, f := range fs {
		m[f.Name] = f
	}
	return m
}

// storageRefused says why storage calls fail in this event, if they do.
func (st *eventState) storageRefused() error {
	switch {
	case st.actor.class.stateless:
		return errStateless
	case st.deleted:
		return errDeleted
	case st.unheld:
		return errUnheld
	}
	return nil
}

// errUnheld refuses storage calls after the actor's replication ended in
// the event (an exec-durable whose upload failed): what it writes could
// not reach the bucket.
var errUnheld = storage.Errorf(abi.SQLInternal, "this node no longer holds the actor: its writes cannot reach the bucket")

// shipDurable makes an exec-durable's commit durable in the bucket when the
// actor is held: it ships it and returns once the bucket acknowledged it
// under the acknowledgement rule, an alarm the event changed listed in the
// bucket's index first (indexAlarm), under the stream's generation. A
// stream that ended, or one abandoned because the alarm could not be
// listed, refuses the event's later storage calls; the actor is given up
// when the event ends.
func (st *eventState) shipDurable(ctx context.Context) error {
	a := st.actor
	if a.stream == nil || faultAckEarly(a) {
		return nil
	}
	if st.alarmTouched {
		if err := a.indexAlarm(ctx); err != nil {
			a.abandonForIndex(err)
			st.unheld = true
			return storage.Errorf(abi.SQLInternal, "committed here, but not made durable: %v", errIndex)
		}
	}
	_, err := a.stream.Ship(ctx)
	if err == nil {
		return nil
	}
	if a.stream.Err() != nil {
		st.unheld = true
	}
	return storage.Errorf(abi.SQLInternal, "committed here, but not acknowledged by the bucket (it may still be there or be lost): %v", err)
}

// statement reads the SQL text and parameters of sql_exec and sql_query.
// The text is copied (a storage driver may keep it as a cache key); the
// parameters' bytes alias guest memory for the duration of the call.
func (st *eventState) statement(mem runtime.Memory, s []uint64) (string, []abi.Value) {
	sql := string(read(mem, s[0], s[1]))
	st.reader.Reset(read(mem, s[2], s[3]))
	st.params = st.reader.Values(st.params[:0])
	if err := st.reader.Done(); err != nil {
		faultf("malformed SQL parameters: %v", err)
	}
	return sql, st.params
}

func (st *eventState) sqlError(mem runtime.Memory, outPtr, outCap uint64, err error) uint64 {
	kind, msg := abi.SQLInternal, err.Error()
	var se *storage.Error
	if errors.As(err, &se) {
		kind, msg = se.Kind, se.Message
	}
	st.out = abi.AppendError(st.out[:0], uint8(kind), msg)
	return st.result(mem, outPtr, outCap, st.out, true)
}

// respond records the response of a request event, copied out of guest
// memory; it is sent once the hook returns successfully.
func (st *eventState) respond(b []byte) uint32 {
	switch {
	case !st.isRequest:
		return abi.RespondNotRequest
	case st.responded:
		return abi.RespondTwice
	}
	r, err := abi.DecodeResponse(b)
	if err != nil || r.Status < 100 || r.Status > 999 {
		return abi.RespondBadEncoding
	}
	for _, h := range r.Headers {
		if !fetch.ValidHeader(h) {
			return abi.RespondBadEncoding
		}
	}
	r.Body = append([]byte(nil), r.Body...)
	st.resp, st.responded = r, true
	return abi.RespondOK
}
