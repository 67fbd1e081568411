// Package queue is a message queue built on an ordinary actor, as the book's
// ADR 0015 describes: a queue class that keeps its messages in the actor's
// own SQLite database, a Client that any actor uses to send, lease, ack and
// retry, and HandleDelivery for a consumer the queue pushes to.
//
// Serve the class with one line:
//
//	func init() {
//		queue.Serve(func() queue.Config {
//			if wasmkeep.Self().Name == "emails" {
//				return queue.Config{}.Consumer("mailer/main") // push
//			}
//			return queue.Config{} // pull only
//		})
//	}
//
//	func main() {}
//
// and reach it from other actors with queue.New("queue/emails"). Delivery is
// at least once: a message may come again, with the same ID and a higher
// Attempt, after a lost ack, a lease that ran out, a failed push or a
// failover. An ack or retry names its lease (ID, Attempt); once the message
// is leased again the old one does nothing and reports so.
//
// docs/sdk-protocols.md ("Queues") is the wire protocol; sdk/go/README.md
// ("Queues") the consistency rules and limits.
package queue

import (
	"errors"
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/actorcall"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
)

// PathPrefix starts every path of the protocol; a queue class with code of
// its own passes the requests under it to Handle.
const PathPrefix = "/wasmkeep-queue/v1/"

// deliverPath is the consumer's path for push deliveries.
const deliverPath = PathPrefix + "deliver"

// MaxBatch is the most messages one send, lease, settle or delivery carries.
const MaxBatch = 1000

// Message is one leased or delivered message. (ID, Attempt) names the lease:
// Attempt is 1 the first time the message is handed out.
type Message struct {
	ID         uint64
	Attempt    uint32
	EnqueuedAt int64 // milliseconds since the Unix epoch
	Body       []byte
}

// The outcome kinds on the wire.
const (
	outcomeAck        = 0
	outcomeRetry      = 1 // after the queue's backoff
	outcomeRetryAfter = 2 // after DelayMs
)

// Outcome is what a consumer makes of a message. The zero Outcome is Ack.
type Outcome struct {
	kind    uint8
	delayMs int64
}

// Ack settles the message: the queue deletes it.
func Ack() Outcome { return Outcome{} }

// Retry makes the message visible again after the queue's backoff.
func Retry() Outcome { return Outcome{kind: outcomeRetry} }

// RetryAfter makes the message visible again after ms milliseconds (at
// most 2^40).
func RetryAfter(ms int64) Outcome {
	return Outcome{kind: outcomeRetryAfter, delayMs: delay.Bound(ms)}
}

// Settlement is one item of Client.Settle: a lease and its outcome.
type Settlement struct {
	ID      uint64
	Attempt uint32
	Outcome Outcome
}

// Of names m's lease with outcome o.
func Of(m Message, o Outcome) Settlement { return Settlement{ID: m.ID, Attempt: m.Attempt, Outcome: o} }

// Stats counts a queue's messages.
type Stats struct {
	Ready    uint64 // visible now
	Delayed  uint64 // sent with a delay or retried, not visible yet
	InFlight uint64 // leased, the lease still running
	Dead     uint64 // dead-lettered
}

// DeadLetter is a message that used up its attempts.
type DeadLetter struct {
	ID         uint64
	Attempts   uint32
	EnqueuedAt int64 // milliseconds since the Unix epoch
	FailedAt   int64
	Reason     string // the last error
	Body       []byte
}

// ErrorKind says why a client call failed.
type ErrorKind uint8

const (
	// Storage: the queue could not read or write its database (a 500).
	Storage ErrorKind = 1 + iota
	// Call: actors.call itself failed. A send may or may not have
	// applied: a send retried after a lost reply may queue the message
	// twice.
	Call
	// Refused: the queue answered another status (Status), or an answer
	// this client cannot read (Status 200).
	Refused
)

func (k ErrorKind) String() string {
	switch k {
	case Storage:
		return "storage"
	case Call:
		return "call"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Error is every error of a Client. errors.Is(err, queue.ErrCall) matches
// by kind; errors.As gives the fields.
type Error struct {
	Kind    ErrorKind
	Status  int // the queue's answer, for Refused
	Message string
}

func (e *Error) Error() string {
	status := 0
	if e.Kind == Refused {
		status = e.Status
	}
	return actorcall.Describe("queue", e.Kind.String(), status, e.Message)
}

// Is matches an *Error of the same kind, so errors.Is(err, ErrStorage)
// works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Kind == e.Kind && t.Message == "" && t.Status == 0
}

// Sentinels for errors.Is.
var (
	ErrStorage = &Error{Kind: Storage}
	ErrCall    = &Error{Kind: Call}
	ErrRefused = &Error{Kind: Refused}
)

// Wire encodings (docs/sdk-protocols.md, "Queues").

// message: u64 id, u32 attempt, u64 enqueued_at, bytes body.
const messageMin = 8 + 4 + 8 + 4

func appendMessages(b []byte, ms []Message) []byte {
	b = abi.AppendU32(b, uint32(len(ms)))
	for _, m := range ms {
		b = abi.AppendU64(b, m.ID)
		b = abi.AppendU32(b, m.Attempt)
		b = abi.AppendU64(b, uint64(m.EnqueuedAt))
		b = abi.AppendBytes(b, m.Body)
	}
	return b
}

func readMessages(r *abi.Reader) []Message {
	ms := make([]Message, r.Count(messageMin))
	for i := range ms {
		ms[i] = Message{ID: r.U64(), Attempt: r.U32(), EnqueuedAt: int64(r.U64()), Body: r.Bytes()}
	}
	return ms
}

// settlement: u64 id, u32 attempt, u8 outcome (0 ack, 1 retry, 2 retry
// after), u64 delay_ms.
const settlementMin = 8 + 4 + 1 + 8

func appendSettlements(b []byte, ss []Settlement) []byte {
	b = abi.AppendU32(b, uint32(len(ss)))
	for _, s := range ss {
		b = abi.AppendU64(b, s.ID)
		b = abi.AppendU32(b, s.Attempt)
		b = append(b, s.Outcome.kind)
		b = abi.AppendU64(b, uint64(s.Outcome.delayMs))
	}
	return b
}

// readSettlements decodes a list of settlements; an unknown outcome or a
// delay past delay.Max is malformed.
func readSettlements(r *abi.Reader) ([]Settlement, error) {
	ss := make([]Settlement, r.Count(settlementMin))
	for i := range ss {
		s := Settlement{ID: r.U64(), Attempt: r.U32()}
		kind, wait := r.U8(), r.U64()
		if r.Err() != nil {
			break
		}
		if kind > outcomeRetryAfter || wait > delay.Max {
			return nil, errors.New("outcome " + strconv.Itoa(i) + ": unknown kind or delay out of range")
		}
		s.Outcome = Outcome{kind: kind, delayMs: int64(wait)}
		ss[i] = s
	}
	return ss, r.Err()
}

// dead letter: u64 id, u32 attempts, u64 enqueued_at, u64 failed_at,
// string reason, bytes body.
const deadLetterMin = 8 + 4 + 8 + 8 + 4 + 4

func appendDeadLetter(b []byte, d DeadLetter) []byte {
	b = abi.AppendU64(b, d.ID)
	b = abi.AppendU32(b, d.Attempts)
	b = abi.AppendU64(b, uint64(d.EnqueuedAt))
	b = abi.AppendU64(b, uint64(d.FailedAt))
	b = abi.AppendString(b, d.Reason)
	return abi.AppendBytes(b, d.Body)
}

func readDeadLetters(r *abi.Reader) []DeadLetter {
	ds := make([]DeadLetter, r.Count(deadLetterMin))
	for i := range ds {
		ds[i] = DeadLetter{ID: r.U64(), Attempts: r.U32(), EnqueuedAt: int64(r.U64()), FailedAt: int64(r.U64()),
			Reason: r.String(), Body: r.Bytes()}
	}
	return ds
}
