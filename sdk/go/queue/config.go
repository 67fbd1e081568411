package queue

import "github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"

// Config is a queue's settings. The zero value of each field is its
// default, so Config{} is a pull-only queue with the book's settings:
//
//	queue.Config{MaxAttempts: 3, BackoffMs: 200}.Consumer("worker/main")
type Config struct {
	BatchSize    int   // messages per push delivery, and per lease that asks for 0: 10 (at most MaxBatch)
	VisibilityMs int64 // how long a push delivery, or a lease that asks for 0, hides its messages: 30 s
	MaxAttempts  int   // leases before a message is dead-lettered: 5
	BackoffMs    int64 // the first retry's delay: 1 s, doubling with each attempt...
	MaxBackoffMs int64 // ...up to this: 5 min
	// Allow, if set, narrows who may call the queue (the book's
	// handle_allowing): it is given the caller's X-Wasmkeep-Caller,
	// "tenant/class/name" with the name percent-encoded, and a caller it
	// refuses gets 403. Without it every actor may (outside requests never).
	Allow func(caller string) bool

	consumer string
}

// Consumer returns c with push delivery to the actor at address
// ("class/name"): the queue's alarm delivers batches to its
// /wasmkeep-queue/v1/deliver path (see HandleDelivery).
func (c Config) Consumer(address string) Config {
	c.consumer = address
	return c
}

// ConsumerAddress is the consumer set with Consumer, or "" for a pull-only
// queue.
func (c Config) ConsumerAddress() string { return c.consumer }

// withDefaults fills the zero fields and bounds the others.
func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = 10
	}
	c.BatchSize = min(c.BatchSize, MaxBatch)
	if c.VisibilityMs <= 0 {
		c.VisibilityMs = 30_000
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.BackoffMs <= 0 {
		c.BackoffMs = 1_000
	}
	if c.MaxBackoffMs <= 0 {
		c.MaxBackoffMs = 300_000
	}
	// Bounded like the wire's delays, so that times and doublings of them
	// cannot overflow.
	c.VisibilityMs = delay.Bound(c.VisibilityMs)
	c.BackoffMs = delay.Bound(c.BackoffMs)
	c.MaxBackoffMs = delay.Bound(max(c.MaxBackoffMs, c.BackoffMs))
	return c
}

// backoff is the delay before attempt+1 after attempt failed: BackoffMs,
// doubling with each attempt, at most MaxBackoffMs.
func (c Config) backoff(attempt uint32) int64 {
	return delay.Backoff(c.BackoffMs, c.MaxBackoffMs, int(attempt))
}
