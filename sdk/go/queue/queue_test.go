package queue

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func TestConfigDefaultsAndBackoff(t *testing.T) {
	c := Config{}.withDefaults()
	if c.BatchSize != 10 || c.VisibilityMs != 30_000 || c.MaxAttempts != 5 || c.BackoffMs != 1_000 || c.MaxBackoffMs != 300_000 {
		t.Fatalf("defaults: %+v", c)
	}
	var got []int64
	for a := uint32(1); a <= 11; a++ {
		got = append(got, c.backoff(a))
	}
	want := []int64{1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("backoff: %v", got)
	}
	if d := c.backoff(1 << 31); d != 300_000 {
		t.Fatalf("backoff of a huge attempt: %d", d)
	}
	c = Config{BatchSize: 5000, BackoffMs: 100, MaxBackoffMs: 50}.Consumer("worker/main").withDefaults()
	if c.BatchSize != MaxBatch || c.MaxBackoffMs != 100 || c.ConsumerAddress() != "worker/main" {
		t.Fatalf("bounds: %+v", c)
	}
}

func TestEncodingsRoundTrip(t *testing.T) {
	ms := []Message{{ID: 1, Attempt: 2, EnqueuedAt: 3, Body: []byte("a")}, {ID: 1 << 60, Attempt: 7, Body: []byte{}}}
	r := abi.NewReader(appendMessages(nil, ms))
	if got := readMessages(r); r.Done() != nil || !reflect.DeepEqual(got, ms) {
		t.Fatalf("messages: %+v %v", got, r.Err())
	}
	ss := []Settlement{Of(ms[0], Ack()), Of(ms[1], Retry()), {ID: 9, Attempt: 1, Outcome: RetryAfter(500)}}
	r = abi.NewReader(appendSettlements(nil, ss))
	if got, err := readSettlements(r); err != nil || r.Done() != nil || !reflect.DeepEqual(got, ss) {
		t.Fatalf("settlements: %+v %v", got, err)
	}
	bad := appendSettlements(nil, []Settlement{{Outcome: Outcome{kind: 3}}})
	if _, err := readSettlements(abi.NewReader(bad)); err == nil {
		t.Fatal("an unknown outcome was accepted")
	}
	// A count larger than the payload cannot allocate.
	if got := readMessages(abi.NewReader(abi.AppendU32(nil, 1<<30))); len(got) != 0 {
		t.Fatal("a corrupt count allocated")
	}
}

// fakeQueue answers one call with status and body, recording the request.
type fakeQueue struct {
	status int
	body   []byte
	err    error
	got    *wasmkeep.Request
	to     string
}

func (f *fakeQueue) client() *Client {
	c := New("queue/q")
	c.call = func(address string, r *wasmkeep.Request) (*wasmkeep.Response, error) {
		f.to, f.got = address, r
		if f.err != nil {
			return nil, f.err
		}
		return &wasmkeep.Response{StatusCode: f.status, Body: f.body}, nil
	}
	return c
}

func TestClientWire(t *testing.T) {
	f := &fakeQueue{status: 200, body: abi.AppendU64(abi.AppendU64(abi.AppendU32(nil, 2), 7), 8)}
	ids, err := f.client().SendBatch([][]byte{[]byte("a"), []byte("b")})
	if err != nil || !reflect.DeepEqual(ids, []uint64{7, 8}) {
		t.Fatalf("SendBatch: %v %v", ids, err)
	}
	want := abi.AppendBytes(abi.AppendBytes(abi.AppendU32(abi.AppendU64(nil, 0), 2), []byte("a")), []byte("b"))
	if f.to != "queue/q" || f.got.Method != "POST" || f.got.URL.Path != "/wasmkeep-queue/v1/send" || !reflect.DeepEqual(f.got.Body, want) {
		t.Fatalf("send request: %s %s %s %x", f.to, f.got.Method, f.got.URL.Path, f.got.Body)
	}
	// An answer with the wrong number of ids is malformed.
	if _, err := f.client().Send([]byte("x")); !errors.Is(err, ErrRefused) {
		t.Fatalf("two ids for one message: %v", err)
	}
	// No call for an empty batch.
	f.got = nil
	if ids, err := f.client().SendBatch(nil); ids != nil || err != nil || f.got != nil {
		t.Fatal("an empty batch made a call")
	}
	// Settle: items the reply leaves out are not current.
	f.body = append(abi.AppendU32(nil, 1), 1)
	current, err := f.client().Settle([]Settlement{{ID: 1, Attempt: 1}, {ID: 2, Attempt: 1}})
	if err != nil || !reflect.DeepEqual(current, []bool{true, false}) {
		t.Fatalf("Settle: %v %v", current, err)
	}
	f.body = abi.AppendU64(abi.AppendU64(abi.AppendU64(abi.AppendU64(nil, 1), 2), 3), 4)
	if s, err := f.client().Stats(); err != nil || s != (Stats{1, 2, 3, 4}) {
		t.Fatalf("Stats: %+v %v", s, err)
	}
	d := DeadLetter{ID: 5, Attempts: 3, EnqueuedAt: 10, FailedAt: 20, Reason: "why", Body: []byte("b")}
	f.body = appendDeadLetter(abi.AppendU32(nil, 1), d)
	if ds, err := f.client().DeadLetters(0); err != nil || !reflect.DeepEqual(ds, []DeadLetter{d}) {
		t.Fatalf("DeadLetters: %+v %v", ds, err)
	}
}

func TestClientErrors(t *testing.T) {
	cases := []struct {
		f    fakeQueue
		is   error
		want string
	}{
		{fakeQueue{err: errors.New("call failed: the callee trapped")}, ErrCall, "queue call: call failed: the callee trapped"},
		{fakeQueue{status: 500, body: []byte("queue: send: disk I/O error\n")}, ErrStorage, "queue storage: queue: send: disk I/O error"},
		{fakeQueue{status: 403, body: []byte("no\n")}, ErrRefused, "queue refused (403): no"},
		{fakeQueue{status: 200, body: []byte{1}}, ErrRefused, "queue refused (200): malformed reply to stats: abi: payload truncated"},
	}
	for _, c := range cases {
		_, err := c.f.client().Stats()
		var e *Error
		if !errors.Is(err, c.is) || !errors.As(err, &e) || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
		for _, other := range []error{ErrCall, ErrStorage, ErrRefused} {
			if other != c.is && errors.Is(err, other) {
				t.Errorf("%v matches %v", err, other)
			}
		}
	}
	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'x'
	}
	f := fakeQueue{status: 418, body: long}
	if _, err := f.client().Stats(); len(err.(*Error).Message) != 400 {
		t.Errorf("a refusal keeps 400 bytes, not %d", len(err.(*Error).Message))
	}
}

// recorder is a ResponseWriter for HandleDelivery.
type recorder struct {
	header wasmkeep.Header
	status int
	body   []byte
}

func (w *recorder) Header() wasmkeep.Header { return w.header }
func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(200)
	w.body = append(w.body, p...)
	return len(p), nil
}

func delivery(t *testing.T, caller string, body []byte) *wasmkeep.Request {
	r, err := wasmkeep.NewRequest("POST", "/wasmkeep-queue/v1/deliver", body)
	if err != nil {
		t.Fatal(err)
	}
	if caller != "" {
		r.Header.Set("X-Wasmkeep-Caller", caller)
	}
	return r
}

func TestHandleDelivery(t *testing.T) {
	ms := []Message{{ID: 4, Attempt: 1, Body: []byte("a")}, {ID: 5, Attempt: 2, Body: []byte("b")}}
	r := delivery(t, "t/queue/q", appendMessages(abi.AppendString(nil, "queue/q"), ms))
	if !IsDelivery(r) {
		t.Fatal("IsDelivery")
	}
	w := &recorder{header: wasmkeep.Header{}}
	var names []string
	HandleDelivery(w, r, func(queue string, m Message) Outcome {
		names = append(names, queue+" "+string(m.Body))
		if m.ID == 5 {
			return RetryAfter(250)
		}
		return Ack()
	})
	in := abi.NewReader(w.body)
	got, err := readSettlements(in)
	want := []Settlement{{ID: 4, Attempt: 1}, {ID: 5, Attempt: 2, Outcome: RetryAfter(250)}}
	if w.status != 200 || err != nil || in.Done() != nil || !reflect.DeepEqual(got, want) ||
		!reflect.DeepEqual(names, []string{"queue/q a", "queue/q b"}) {
		t.Fatalf("reply %d %+v %v, handled %v", w.status, got, err, names)
	}
	for _, c := range []struct {
		caller string
		body   []byte
		status int
	}{{"", appendMessages(abi.AppendString(nil, "queue/q"), nil), 403}, {"t/queue/q", []byte{1, 2}, 400}} {
		w := &recorder{header: wasmkeep.Header{}}
		HandleDelivery(w, delivery(t, c.caller, c.body), func(string, Message) Outcome { panic("called") })
		if w.status != c.status {
			t.Errorf("caller %q body %x: %d, want %d", c.caller, c.body, w.status, c.status)
		}
	}
}

// Huge settings and delays are bounded, so that no time or backoff
// overflows: a retry never comes at once because a doubling wrapped.
func TestDelaysBounded(t *testing.T) {
	c := Config{VisibilityMs: math.MaxInt64, BackoffMs: math.MaxInt64 / 2, MaxBackoffMs: math.MaxInt64}.withDefaults()
	if c.VisibilityMs != delay.Max || c.BackoffMs != delay.Max || c.MaxBackoffMs != delay.Max {
		t.Errorf("bounded config: %+v", c)
	}
	c = Config{BackoffMs: 1000, MaxBackoffMs: math.MaxInt64}.withDefaults()
	for attempt := uint32(1); attempt < 100; attempt++ {
		if d := c.backoff(attempt); d <= 0 || d > delay.Max {
			t.Fatalf("backoff(%d) = %d", attempt, d)
		}
	}
	if o := RetryAfter(math.MaxInt64); o.delayMs != delay.Max {
		t.Errorf("RetryAfter(MaxInt64) waits %d ms", o.delayMs)
	}
}
