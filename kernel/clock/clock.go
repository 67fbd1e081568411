// Package clock is the time the kernel's protocols read and wait on: the
// wall clock in a server (Real), a clock a test or a simulation moves by
// hand (Manual). Code that takes a Clock calls no time.Now, time.Sleep or
// timer of its own, so a seeded simulation decides when everything happens.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and arms timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on a goroutine of its own once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer sends the time on the timer's channel once d has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is a timer a Clock armed.
type Timer interface {
	// C is the channel a NewTimer timer fires on (nil for AfterFunc).
	C() <-chan time.Time
	// Stop disarms the timer; it reports whether the timer was armed.
	Stop() bool
	// Reset arms the timer again for d; it reports whether it was armed.
	Reset(d time.Duration) bool
}

// Sleep waits d on c, or until ctx is done (returning its error).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithTimeout is context.WithTimeout on c: the context is cancelled once d
// has passed on c, with context.DeadlineExceeded as its cause
// (context.Cause). It has no Deadline, since c need not be the wall clock:
// only what waits on Done may rely on it.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := c.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{t: time.AfterFunc(d, f)}
}

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{t: time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
