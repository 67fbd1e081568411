//go:build wasip1

package wasmkeep

import (
	"strconv"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// The host functions of docs/abi.md section 4. Buffers cross as
// unsafe.Pointer (an i32 offset into linear memory), never as uintptr, so the
// garbage collector sees them as live arguments for the whole call.

//go:wasmimport wasmkeep take_pending
func takePending(ptr unsafe.Pointer) int32

//go:wasmimport wasmkeep hook_error
func hookError(msg string)

//go:wasmimport wasmkeep respond
func respond(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmkeep sql_exec
func sqlExec(sql string, params unsafe.Pointer, paramsLen, flags uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wasmkeep sql_query
func sqlQuery(sql string, params unsafe.Pointer, paramsLen uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wasmkeep delete_self
func deleteSelf(flags uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wasmkeep alarm_set
func alarmSet(atMillis int64)

//go:wasmimport wasmkeep alarm_get
func alarmGet() int64

//go:wasmimport wasmkeep alarm_clear
func alarmClear()

//go:wasmimport wasmkeep actor_call
func actorCall(addr string, req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wasmkeep self_address
func selfAddress(out unsafe.Pointer, outCap uint32) int32

//go:wasmimport wasmkeep env_get
func envGet(name string, out unsafe.Pointer, outCap uint32) int32

// scratch is the output buffer of every host call. Most payloads (row
// counts, errors, small result sets) fit, so an operation is one host call;
// a larger one costs a second call, take_pending.
var scratch [16 << 10]byte

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func out() (unsafe.Pointer, uint32) { return unsafe.Pointer(&scratch[0]), uint32(len(scratch)) }

// result returns the payload of a host call that returned n, and whether it
// is a success rather than an error payload. A payload in scratch is valid
// until the next host call, unless own asks for a copy the caller keeps.
func result(n int32, own bool) ([]byte, bool) {
	size := int(n)
	if n < 0 {
		size = -size
	}
	if size > len(scratch) {
		return pending(size), n >= 0
	}
	if own {
		return append([]byte(nil), scratch[:size]...), n >= 0
	}
	return scratch[:size], n >= 0
}

// pending fetches the size-byte pending payload.
func pending(size int) []byte {
	b := make([]byte, size)
	if size > 0 && takePending(unsafe.Pointer(&b[0])) != int32(size) {
		panic("wasmkeep: the host's pending payload is missing or not the announced size")
	}
	return b
}

//go:wasmexport wasmkeep_abi_v1
func abiV1() {}

//go:wasmexport wasmkeep_on_init
func onInit() int32 {
	defer release()
	if initHook == nil {
		return 0
	}
	return done(run(initHook))
}

//go:wasmexport wasmkeep_on_alarm
func onAlarm() int32 {
	defer release()
	if alarmHook == nil {
		return done("wasmkeep: an alarm is due but no OnAlarm hook is set")
	}
	return done(run(alarmHook))
}

//go:wasmexport wasmkeep_on_request
func onRequest(n uint32) int32 {
	defer release()
	resp, failure := serveRequest(pending(int(n)))
	if failure == "" {
		switch errno := respond(ptr(resp), uint32(len(resp))); errno {
		case abi.RespondOK:
		case abi.RespondBadEncoding:
			failure = "wasmkeep: the host refused the response: a header name or value is not valid HTTP"
		default:
			failure = "wasmkeep: respond failed with errno " + strconv.Itoa(int(errno))
		}
	}
	return done(failure)
}

// done ends a hook: 0, or 1 once the failure is reported.
func done(failure string) int32 {
	if failure == "" {
		return 0
	}
	hookError(failure)
	return 1
}

// Exec runs one statement that returns no rows, with args bound to its "?"
// parameters, and returns the number of rows changed. It returns once the
// write is committed locally. Errors are *SQLError.
func Exec(sql string, args ...any) (int64, error) { return exec(sql, 0, args) }

// ExecDurable is Exec that returns only once the write is durable: in the
// bucket on a cluster, fsynced on a single node. Inside a transaction it
// takes only COMMIT (or END), which makes the whole transaction durable.
func ExecDurable(sql string, args ...any) (int64, error) { return exec(sql, abi.ExecDurable, args) }

func exec(sql string, flags uint32, args []any) (int64, error) {
	p, err := appendArgs(enc[:0], args)
	if err != nil {
		return 0, err
	}
	enc = p
	o, oc := out()
	b, ok := result(sqlExec(sql, ptr(p), uint32(len(p)), flags, o, oc), false)
	if !ok {
		return 0, decodeSQLError(b)
	}
	return decodeCount(b)
}

// Query runs one statement and returns all its rows. Errors are *SQLError.
func Query(sql string, args ...any) (*Rows, error) {
	p, err := appendArgs(enc[:0], args)
	if err != nil {
		return nil, err
	}
	enc = p
	o, oc := out()
	b, ok := result(sqlQuery(sql, ptr(p), uint32(len(p)), o, oc), true)
	if !ok {
		return nil, decodeSQLError(b)
	}
	return decodeRows(b)
}

// QueryRow runs Query for a statement expected to return at most one row;
// Scan reports its error.
func QueryRow(sql string, args ...any) *Row {
	rows, err := Query(sql, args...)
	return &Row{rows: rows, err: err}
}

// DeleteSelf deletes this actor when the current event ends: its database and
// its alarm. The next event to its address starts a new actor.
func DeleteSelf() error { return deleteWith(0) }

// DeleteSelfDurable deletes this actor now, inside the call; later storage
// calls in the event fail with SQLNotAllowed.
func DeleteSelfDurable() error { return deleteWith(abi.DeleteDurable) }

func deleteWith(flags uint32) error {
	o, oc := out()
	if b, ok := result(deleteSelf(flags, o, oc), false); !ok {
		return decodeSQLError(b)
	}
	return nil
}

// SetAlarm schedules the OnAlarm hook at at, in milliseconds since the Unix
// epoch (time.Now().Add(d).UnixMilli()), replacing the pending alarm. A time
// in the past fires as soon as possible. The SDK takes milliseconds rather
// than a time.Time because importing package time adds about 260 KB to every
// actor.
func SetAlarm(at int64) { alarmSet(at) }

// GetAlarm returns the pending alarm's time in milliseconds since the Unix
// epoch, and false if there is none.
func GetAlarm() (int64, bool) {
	at := alarmGet()
	return at, at >= 0
}

// ClearAlarm cancels the pending alarm, if any.
func ClearAlarm() { alarmClear() }

// Call sends r to the actor at address, "class/name" in the caller's tenant
// (the name percent-encoded if it holds "/" or "%"), and waits for its
// response; meanwhile other events to this actor wait. The callee sees the
// header X-Wasmkeep-Caller: tenant/class/name. Errors are *CallError.
func Call(address string, r *Request) (*Response, error) {
	req := encodeCall(r)
	o, oc := out()
	b, ok := result(actorCall(address, ptr(req), uint32(len(req)), o, oc), true)
	if !ok {
		return nil, decodeCallError(b)
	}
	return decodeResponse(b)
}

var self *Address

// Self returns this actor's address. An instance serves a single actor, so
// the host is asked once.
func Self() Address {
	if self == nil {
		o, oc := out()
		b, _ := result(selfAddress(o, oc), false)
		a, err := decodeAddress(b)
		if err != nil {
			panic(err)
		}
		self = &a
	}
	return *self
}

// Env returns the value of the configuration or secret name given to the
// actor's class (its deployed configuration, the app's secrets in the
// bucket, the node's --env: last wins), and false if it is not set. Values
// change only between events, when a deploy or a secrets change lands,
// never during one.
func Env(name string) (string, bool) {
	o, oc := out()
	b, ok := result(envGet(name, o, oc), false)
	if !ok {
		return "", false
	}
	return string(b), true
}
