package queue

import (
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/actorcall"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
)

// Client reaches one queue, an actor of a queue class. Each method is one
// actors.call, which holds the caller's event while it runs. Errors are
// *Error.
type Client struct {
	address string
	call    actorcall.Func // actorcall.Host; tests substitute a fake
}

// New returns a client of the queue at address, "class/name" (the name
// percent-encoded if it holds "/" or "%").
func New(address string) *Client { return &Client{address: address, call: actorcall.Host} }

// Address is the queue's address.
func (c *Client) Address() string { return c.address }

// Send queues body and returns its id once the message is durable.
func (c *Client) Send(body []byte) (uint64, error) { return c.SendDelayed(body, 0) }

// SendDelayed is Send for a message that becomes visible after delayMs.
func (c *Client) SendDelayed(body []byte, delayMs int64) (uint64, error) {
	ids, err := c.send([][]byte{body}, delayMs)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// SendBatch queues up to MaxBatch bodies in one write, all or none, and
// returns their ids in order. An empty batch makes no call.
func (c *Client) SendBatch(bodies [][]byte) ([]uint64, error) {
	if len(bodies) == 0 {
		return nil, nil
	}
	return c.send(bodies, 0)
}

func (c *Client) send(bodies [][]byte, delayMs int64) ([]uint64, error) {
	b := abi.AppendU64(nil, uint64(max(delayMs, 0)))
	b = abi.AppendU32(b, uint32(len(bodies)))
	for _, body := range bodies {
		b = abi.AppendBytes(b, body)
	}
	in, err := c.do("send", b)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, in.Count(8))
	for i := range ids {
		ids[i] = in.U64()
	}
	if err := done(in, "send"); err != nil {
		return nil, err
	}
	if len(ids) != len(bodies) {
		return nil, &Error{Kind: Refused, Status: 200, Message: "malformed reply to send: " + strconv.Itoa(len(ids)) + " ids for " + strconv.Itoa(len(bodies)) + " messages"}
	}
	return ids, nil
}

// Lease takes up to max visible messages (0: the queue's batch size),
// oldest visible first, and hides them for visibilityMs (0: the queue's
// visibility timeout). Ack or retry each before its lease runs out, or it
// is delivered again with a higher Attempt.
func (c *Client) Lease(max int, visibilityMs int64) ([]Message, error) {
	b := abi.AppendU32(nil, uint32(clamp(int64(max), MaxBatch+1)))
	in, err := c.do("lease", abi.AppendU64(b, uint64(clamp(visibilityMs, delay.Max))))
	if err != nil {
		return nil, err
	}
	ms := readMessages(in)
	return ms, done(in, "lease")
}

// Ack deletes m; false if its lease is no longer current (it ran out, or
// the message was settled or leased again), in which case nothing changed.
func (c *Client) Ack(m Message) (bool, error) { return c.settleOne(Of(m, Ack())) }

// Retry makes m visible again after the queue's backoff (on its last
// attempt: dead-letters it); false if its lease is no longer current.
func (c *Client) Retry(m Message) (bool, error) { return c.settleOne(Of(m, Retry())) }

// RetryAfter is Retry after delayMs instead of the backoff.
func (c *Client) RetryAfter(m Message, delayMs int64) (bool, error) {
	return c.settleOne(Of(m, RetryAfter(delayMs)))
}

func (c *Client) settleOne(s Settlement) (bool, error) {
	current, err := c.Settle([]Settlement{s})
	if err != nil {
		return false, err
	}
	return current[0], nil
}

// Settle applies up to MaxBatch outcomes in one call and says, item by
// item, whether the lease was current (and the outcome applied).
func (c *Client) Settle(items []Settlement) ([]bool, error) {
	if len(items) == 0 {
		return nil, nil
	}
	in, err := c.do("settle", appendSettlements(nil, items))
	if err != nil {
		return nil, err
	}
	n := in.Count(1)
	current := make([]bool, max(n, len(items)))
	for i := 0; i < n; i++ {
		current[i] = in.U8() == 1
	}
	if err := done(in, "settle"); err != nil {
		return nil, err
	}
	return current[:len(items)], nil // items the reply leaves out are not current
}

// Stats counts the queue's messages.
func (c *Client) Stats() (Stats, error) {
	in, err := c.do("stats", nil)
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Ready: in.U64(), Delayed: in.U64(), InFlight: in.U64(), Dead: in.U64()}
	return s, done(in, "stats")
}

// DeadLetters lists up to limit dead-lettered messages (0: 100, at most
// MaxBatch), oldest id first, with the reason each failed.
func (c *Client) DeadLetters(limit int) ([]DeadLetter, error) {
	in, err := c.do("dead", abi.AppendU32(nil, uint32(clamp(int64(limit), MaxBatch+1))))
	if err != nil {
		return nil, err
	}
	ds := readDeadLetters(in)
	return ds, done(in, "dead")
}

// do calls the queue's op with body and returns a reader over the 200's
// body. Another status is an *Error: 500 Storage, anything else Refused,
// with the first 400 bytes of the answer.
func (c *Client) do(op string, body []byte) (*abi.Reader, error) {
	b, f := actorcall.Post(c.call, c.address, PathPrefix+op, body)
	switch {
	case f == nil:
		return abi.NewReader(b), nil
	case f.Err != nil:
		return nil, &Error{Kind: Call, Message: f.Err.Error()}
	case f.Status == 500:
		return nil, &Error{Kind: Storage, Message: f.Message}
	}
	return nil, &Error{Kind: Refused, Status: f.Status, Message: f.Message}
}

// done checks that a reply was read to its end.
func done(in *abi.Reader, op string) error {
	if err := in.Done(); err != nil {
		return &Error{Kind: Refused, Status: 200, Message: "malformed reply to " + op + ": " + err.Error()}
	}
	return nil
}

// clamp bounds v to [0, hi]; a count past the protocol's limit is left
// for the queue to refuse.
func clamp(v, hi int64) int64 { return min(max(v, 0), hi) }
