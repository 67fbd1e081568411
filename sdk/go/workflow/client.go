package workflow

import (
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/actorcall"
)

// The wire protocol between Client and the runner (docs/sdk-protocols.md,
// "Workflows"): POST to prefix+op on the instance's actor, bodies in the
// ABI's encoding.
const prefix = "/wasmkeep-workflow/v1/"

// State is where an instance is.
type State uint32

const (
	Running   State = iota // runs, or is about to run, in its own event
	Waiting                // parked until WakeAt, for WaitingFor, or both
	Completed              // returned its Output
	Failed                 // failed with Error
	Cancelled              // cancelled by Client.Cancel
)

var stateNames = [...]string{"running", "waiting", "completed", "failed", "cancelled"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state " + strconv.FormatUint(uint64(s), 10)
}

// Finished reports whether the instance takes no more events: completed,
// failed or cancelled.
func (s State) Finished() bool { return s >= Completed }

// Status is an instance's status, as Client's calls return it.
type Status struct {
	State      State
	WakeAt     int64    // when a waiting instance wakes, in ms since the Unix epoch; 0 for none
	WaitingFor []string // the events a waiting instance waits for
	Output     []byte   // a completed instance's output; nil when there is none (an empty output is non-nil)
	Error      string   // a failed instance's error; "" when there is none
	Positions  int      // how many positions (steps, sleeps, waits) are recorded
}

// ErrorKind says why a Client call failed.
type ErrorKind int

const (
	KindUnknown   ErrorKind = iota + 1 // 404: no such instance (never started, or past its retention)
	KindFinished                       // 409: an event to a finished instance
	KindCall                           // the call failed: the instance may or may not have recorded it
	KindRefused                        // any other answer; Status has its status (200 for a malformed body)
	KindFailed                         // Result: the instance failed (Message is its error)
	KindCancelled                      // Result: the instance was cancelled
)

var kindNames = [...]string{"", "unknown", "finished", "call", "refused", "failed", "cancelled"}

func (k ErrorKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// Error is the error of every Client call. errors.Is matches it against
// ErrUnknown, ErrFinished, ErrCall, ErrRefused, ErrFailed and ErrCancelled
// by its Kind.
type Error struct {
	Kind    ErrorKind
	Status  int // the HTTP status of a refusal (KindRefused), else 0
	Message string
}

func (e *Error) Error() string {
	status := 0
	if e.Kind == KindRefused {
		status = e.Status
	}
	return actorcall.Describe("workflow", e.Kind.String(), status, e.Message)
}

// Is matches errors of the same Kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

// The kinds, for errors.Is.
var (
	ErrUnknown   = &Error{Kind: KindUnknown}
	ErrFinished  = &Error{Kind: KindFinished}
	ErrCall      = &Error{Kind: KindCall}
	ErrRefused   = &Error{Kind: KindRefused}
	ErrFailed    = &Error{Kind: KindFailed}
	ErrCancelled = &Error{Kind: KindCancelled}
)

// Client starts and follows the instances of a workflow class. Every call
// is a wasmkeep.Call to the instance's actor, class/id, that only reads or
// records: the workflow runs in its own events.
type Client struct {
	class string
	call  actorcall.Func // actorcall.Host; tests substitute a fake
}

// New returns a client of the workflow class.
func New(class string) *Client { return &Client{class: class, call: actorcall.Host} }

// Start records a new instance with its input and returns its status; it
// runs in its own event right after. If the instance exists (until its
// retention ends), Start changes nothing and returns its status.
func (c *Client) Start(id string, input []byte) (*Status, error) {
	b, err := c.do(id, "start", abi.AppendBytes(nil, input))
	if err != nil {
		return nil, err
	}
	return decodeStatus(b)
}

// Status returns the instance's status.
func (c *Client) Status(id string) (*Status, error) {
	b, err := c.do(id, "status", nil)
	if err != nil {
		return nil, err
	}
	return decodeStatus(b)
}

// SendEvent delivers the event name with its payload to the instance. Each
// WaitForEvent takes the oldest event of its name not taken yet. An event
// to an unknown id is refused (ErrUnknown), to a finished one ErrFinished.
func (c *Client) SendEvent(id, name string, payload []byte) error {
	_, err := c.do(id, "event", abi.AppendBytes(abi.AppendString(nil, name), payload))
	return err
}

// Cancel stops the instance at once and returns its status; a step running
// at that moment finishes first. A finished instance is left as it is.
func (c *Client) Cancel(id string) (*Status, error) {
	b, err := c.do(id, "cancel", nil)
	if err != nil {
		return nil, err
	}
	return decodeStatus(b)
}

// Result returns a finished instance's output with done true; done is
// false while it runs or waits. A failed instance's error is ErrFailed
// (its Message the workflow's error), a cancelled one's ErrCancelled.
func (c *Client) Result(id string) (output []byte, done bool, err error) {
	s, err := c.Status(id)
	if err != nil {
		return nil, false, err
	}
	switch s.State {
	case Completed:
		return s.Output, true, nil
	case Failed:
		return nil, true, &Error{Kind: KindFailed, Message: s.Error}
	case Cancelled:
		return nil, true, &Error{Kind: KindCancelled, Message: "cancelled"}
	}
	return nil, false, nil
}

// do sends op to the instance and returns the body of its 200.
func (c *Client) do(id, op string, body []byte) ([]byte, error) {
	b, f := actorcall.Post(c.call, c.class+"/"+escapeName(id), prefix+op, body)
	switch {
	case f == nil:
		return b, nil
	case f.Err != nil:
		return nil, &Error{Kind: KindCall, Message: f.Err.Error()}
	case f.Status == 404:
		return nil, &Error{Kind: KindUnknown, Message: f.Message}
	case f.Status == 409:
		return nil, &Error{Kind: KindFinished, Message: f.Message}
	}
	return nil, &Error{Kind: KindRefused, Status: f.Status, Message: f.Message}
}

// escapeName percent-encodes the two bytes an actor name cannot carry
// plainly in an address, "%" and "/".
func escapeName(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
}

// appendStatus encodes a status reply: u32 state, u64 wake_at, the names
// waited for (u32 count, then strings), u32 has_output, bytes output,
// string error, u64 positions.
func appendStatus(b []byte, s *Status) []byte {
	b = abi.AppendU32(b, uint32(s.State))
	b = abi.AppendU64(b, uint64(s.WakeAt))
	b = abi.AppendU32(b, uint32(len(s.WaitingFor)))
	for _, n := range s.WaitingFor {
		b = abi.AppendString(b, n)
	}
	has := uint32(0)
	if s.Output != nil {
		has = 1
	}
	b = abi.AppendU32(b, has)
	b = abi.AppendBytes(b, s.Output)
	b = abi.AppendString(b, s.Error)
	return abi.AppendU64(b, uint64(s.Positions))
}

func decodeStatus(b []byte) (*Status, error) {
	r := abi.NewReader(b)
	s := &Status{State: State(r.U32()), WakeAt: int64(r.U64())}
	n := r.Count(4)
	for range n {
		s.WaitingFor = append(s.WaitingFor, r.String())
	}
	has := r.U32()
	out := r.Bytes()
	if has != 0 {
		s.Output = append([]byte{}, out...)
	}
	s.Error = r.String()
	s.Positions = int(r.U64())
	if err := r.Done(); err != nil {
		return nil, &Error{Kind: KindRefused, Status: 200, Message: "malformed status: " + err.Error()}
	}
	if int(s.State) >= len(stateNames) {
		return nil, &Error{Kind: KindRefused, Status: 200, Message: "malformed status: unknown state " + strconv.Itoa(int(s.State))}
	}
	return s, nil
}
