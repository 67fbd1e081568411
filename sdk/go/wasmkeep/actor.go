package wasmkeep

import (
	"runtime"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// Address is an actor's address, tenant/class/name. Its Name is decoded: any
// text without "/" or control characters.
type Address = abi.Address

// CallErrorKind says why Call failed.
type CallErrorKind = abi.CallErrorKind

const (
	CallInvalidAddress = abi.CallInvalidAddress // the address is not class/name, or no such class exists
	CallReentrant      = abi.CallReentrant      // the callee already waits in this call chain
	CallTooLarge       = abi.CallTooLarge       // the request or response body is over 16 MB
	CallTimeout        = abi.CallTimeout        // the callee did not answer within the event's wall-clock limit
	CallFailed         = abi.CallFailed         // the callee trapped, or the host could not deliver the call
)

// CallError is the error of Call; find it with errors.As. A callee that
// answers, even with a 500, is a Response, not a CallError.
type CallError struct {
	Kind    CallErrorKind
	Message string
}

func (e *CallError) Error() string {
	if e.Message == "" {
		return "call " + e.Kind.String()
	}
	return "call " + e.Kind.String() + ": " + e.Message
}

func decodeCallError(b []byte) *CallError {
	var r abi.Reader
	r.Reset(b)
	return &CallError{Kind: CallErrorKind(r.U8()), Message: string(r.Rest())}
}

func decodeAddress(b []byte) (Address, error) {
	var r abi.Reader
	r.Reset(b)
	a := r.Address()
	if err := r.Done(); err != nil {
		return Address{}, malformed("address", err)
	}
	return a, nil
}

var initHook, alarmHook func() error

// OnInit sets f to run before the first event an instance handles with this
// module version: once for a new actor and again after each deploy. Create
// and migrate tables there. If f fails, the event fails and f runs again
// with the next one. Call OnInit from an init function.
func OnInit(f func() error) {
	if initHook != nil {
		panic("wasmkeep: OnInit called twice")
	}
	initHook = f
}

// OnAlarm sets f to run when the alarm set with SetAlarm is due. An alarm
// fires at least once: a failing f is retried (after 1 s, doubling up to 5
// minutes), so f must be idempotent. Call OnAlarm from an init function.
func OnAlarm(f func() error) {
	if alarmHook != nil {
		panic("wasmkeep: OnAlarm called twice")
	}
	alarmHook = f
}

// run calls a hook and returns the message it fails with, or "". A panic is
// a failure too, with its stack written to stderr (the node's log), so that
// one bad event does not take the instance down.
func run(f func() error) (failure string) {
	defer func() {
		if p := recover(); p != nil {
			failure = "panic: " + panicText(p)
			stack := make([]byte, 8<<10)
			print("wasmkeep: ", failure, "\n", string(stack[:runtime.Stack(stack, false)]))
		}
	}()
	if err := f(); err != nil {
		if failure = err.Error(); failure == "" {
			failure = "the hook failed with an empty error"
		}
	}
	return failure
}

func panicText(p any) string {
	switch p := p.(type) {
	case error:
		return p.Error()
	case string:
		return p
	case interface{ String() string }:
		return p.String()
	}
	return "a value that is neither an error nor a string"
}
