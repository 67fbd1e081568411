package workflow

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func TestStatusRoundTrip(t *testing.T) {
	for _, s := range []*Status{
		{State: Running},
		{State: Waiting, WakeAt: 1234, WaitingFor: []string{"approved"}, Positions: 3},
		{State: Completed, Output: []byte{}, Positions: 5},
		{State: Completed, Output: []byte("shipped")},
		{State: Failed, Error: "not approved in time", Positions: 2},
		{State: Cancelled},
	} {
		got, err := decodeStatus(appendStatus(nil, s))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("%+v: got %+v, %v", s, got, err)
		}
	}
	if _, err := decodeStatus(append(appendStatus(nil, &Status{}), 0)); !errors.Is(err, ErrRefused) {
		t.Errorf("trailing byte: %v", err)
	}
	if _, err := decodeStatus(appendStatus(nil, &Status{State: 9})); !errors.Is(err, ErrRefused) {
		t.Errorf("unknown state: %v", err)
	}
}

// fake answers every call with status and body, and keeps the last request.
type fake struct {
	status  int
	body    []byte
	err     error
	address string
	req     *wasmkeep.Request
}

func (f *fake) call(address string, r *wasmkeep.Request) (*wasmkeep.Response, error) {
	f.address, f.req = address, r
	if f.err != nil {
		return nil, f.err
	}
	return &wasmkeep.Response{StatusCode: f.status, Body: f.body}, nil
}

func TestClientRequestsAndErrors(t *testing.T) {
	f := &fake{status: 200, body: appendStatus(nil, &Status{State: Running})}
	c := New("orders")
	c.call = f.call
	if s, err := c.Start("a/b%c", []byte("in")); err != nil || s.State != Running {
		t.Fatalf("start: %+v %v", s, err)
	}
	if f.address != "orders/a%2Fb%25c" || f.req.Method != "POST" || f.req.URL.Path != "/wasmkeep-workflow/v1/start" ||
		!bytes.Equal(f.req.Body, abi.AppendBytes(nil, []byte("in"))) {
		t.Fatalf("start sent %s %s %s %q", f.address, f.req.Method, f.req.URL.Path, f.req.Body)
	}
	f.body = nil
	if err := c.SendEvent("x", "approved", []byte("p")); err != nil || f.req.URL.Path != "/wasmkeep-workflow/v1/event" {
		t.Fatalf("event: %v %s", err, f.req.URL.Path)
	}
	for status, want := range map[int]error{404: ErrUnknown, 409: ErrFinished, 500: ErrRefused, 403: ErrRefused} {
		f.status, f.body = status, []byte("why\n")
		_, err := c.Status("x")
		var e *Error
		if !errors.Is(err, want) || !errors.As(err, &e) || e.Message != "why" {
			t.Errorf("%d: %v", status, err)
		}
	}
	f.err = errors.New("timeout")
	if _, err := c.Cancel("x"); !errors.Is(err, ErrCall) {
		t.Errorf("a failed call: %v", err)
	}
	f.err, f.status = nil, 200
	for s, want := range map[State]error{Failed: ErrFailed, Cancelled: ErrCancelled} {
		f.body = appendStatus(nil, &Status{State: s, Error: "boom"})
		if _, done, err := c.Result("x"); !done || !errors.Is(err, want) {
			t.Errorf("result of %v: %v %v", s, done, err)
		}
	}
	f.body = appendStatus(nil, &Status{State: Completed, Output: []byte("out")})
	if out, done, err := c.Result("x"); !done || err != nil || string(out) != "out" {
		t.Errorf("result: %q %v %v", out, done, err)
	}
	f.body = appendStatus(nil, &Status{State: Waiting})
	if _, done, err := c.Result("x"); done || err != nil {
		t.Errorf("result of a waiting instance: %v %v", done, err)
	}
}

// Durations are bounded, so that no time overflows into the past: a
// retention of math.MaxInt64 keeps an instance, it does not delete it
// (the backoff and the sums: package delay's tests).
func TestDurationsBounded(t *testing.T) {
	c := Config{BackoffMs: math.MaxInt64, MaxBackoffMs: math.MaxInt64, RetentionMs: math.MaxInt64, RunBudgetMs: math.MaxInt64}.withDefaults()
	if c.BackoffMs != delay.Max || c.MaxBackoffMs != delay.Max || c.RetentionMs != delay.Max || c.RunBudgetMs != delay.Max {
		t.Errorf("bounded config: %+v", c)
	}
}
