// Package simtest is what the cluster protocols' tests share: a clock.Manual
// moved in small ticks inside a testing/synctest bubble, so every goroutine
// woken by a tick has run before the next one, and a clock skewed from it.
package simtest

import (
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// Tick is how far one step moves the clock.
const Tick = 50 * time.Millisecond

// Epoch is where every test clock starts.
var Epoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// Clock is a Manual clock stepped in Ticks; call it only inside a
// synctest bubble.
type Clock struct{ *clock.Manual }

// New returns a clock at Epoch.
func New() *Clock { return &Clock{clock.NewManual(Epoch)} }

// Step lets every goroutine settle, then moves the clock by d in Ticks,
// letting them settle after each.
func (c *Clock) Step(d time.Duration) {
	synctest.Wait()
	for d > 0 {
		s := min(d, Tick)
		c.Advance(s)
		synctest.Wait()
		d -= s
	}
}

// Until steps until done reports true, at most limit; it reports whether
// done did.
func (c *Clock) Until(limit time.Duration, done func() bool) bool {
	synctest.Wait()
	for end := c.Now().Add(limit); !done(); {
		if !c.Now().Before(end) {
			return false
		}
		c.Step(Tick)
	}
	return true
}

// Since is how long after Epoch the clock reads.
func (c *Clock) Since() time.Duration { return c.Now().Sub(Epoch) }

// Skewed is a clock reading d ahead of c (behind if d < 0); its timers are
// c's.
type Skewed struct {
	clock.Clock
	D time.Duration
}

func (s Skewed) Now() time.Time { return s.Clock.Now().Add(s.D) }
