// Package actorcall is the one request every client of the SDK's patterns
// (kv, queue, workflow) makes: a POST of an encoded body to a path on an
// actor, through actors.call, and the rules for its answer that
// docs/sdk-protocols.md gives for all three.
package actorcall

import (
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// Func sends r to the actor at address: Host in a guest, a fake in a
// package's unit tests.
type Func func(address string, r *wasmkeep.Request) (*wasmkeep.Response, error)

// MaxMessage is how much of a refusal's answer a client keeps as its
// message.
const MaxMessage = 400

// Failure says why a call got no 200: Err when the call itself failed
// (a write it carried may or may not have applied), otherwise the answer's
// Status and Message (its first MaxMessage bytes, without the newline
// that ends a plain-text error).
type Failure struct {
	Err     error
	Status  int
	Message string
}

// Post sends body to path on the actor at address and returns the
// answer's body when it is 200.
func Post(call Func, address, path string, body []byte) ([]byte, *Failure) {
	req, err := wasmkeep.NewRequest("POST", path, body)
	if err != nil {
		return nil, &Failure{Err: err}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := call(address, req)
	if err != nil {
		return nil, &Failure{Err: err}
	}
	if resp.StatusCode == 200 {
		return resp.Body, nil
	}
	msg := resp.Body[:min(len(resp.Body), MaxMessage)]
	return nil, &Failure{Status: resp.StatusCode, Message: strings.TrimSuffix(string(msg), "\n")}
}

// Describe is the message of a pattern client's error, the same shape in
// every package: "kv refused (403): forbidden", "queue call: <why>". A zero
// status and an empty message are left out.
func Describe(pattern, kind string, status int, message string) string {
	s := pattern + " " + kind
	if status != 0 {
		s += " (" + strconv.Itoa(status) + ")"
	}
	if message != "" {
		s += ": " + message
	}
	return s
}
