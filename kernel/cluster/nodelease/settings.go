// Package nodelease is a node's lease (book ADR 0020, sections 1, 2, 4 and
// 5): the object nodes/<id>, written only by conditional Puts on a task of
// its own; the start check that refuses a second process with the same id;
// the fence a peer writes over a node that stopped renewing; and the
// released write of a clean stop. It is logic over a bucket.Bucket and a
// clock.Clock, with no network and no wall-clock call of its own, so a test
// or a simulation decides when everything happens. ADR 1023 records what
// the book left open.
//
// A write stores its send time on the wall clock (written_at, in ms), which
// is what peers date the node by. The node's own validity, ttl - safety
// after the send of its latest acknowledged write, is kept on the clock's
// monotonic reading (clock.Real's time.Now carries one), so a step of the
// machine's wall clock never lengthens it; a write adopted after its reply
// was lost counts from its own send, as recorded when it was sent. The
// lease's events (Lapsed, Renewed, Lost) are delivered in the order they
// were decided, one at a time (Events).
package nodelease

import (
	"fmt"
	"time"
)

// Settings are the lease's timings (plugins.yaml cluster:, book ADR 0020
// section 5). The zero HeartbeatPeriod means ttl / 3.
type Settings struct {
	TTL             time.Duration // how long a write keeps the lease, from its send
	Grace           time.Duration // added to ttl before a peer may take over
	Safety          time.Duration // taken off ttl by the holder
	MaxSkew         time.Duration // the clock skew between nodes tolerated
	HeartbeatPeriod time.Duration // a lease write every period, at most ttl / 3
}

// DefaultSettings are the book's: ttl 10 s, grace 5 s, safety 2 s, max skew
// 1 s, a write every 3 s.
func DefaultSettings() Settings {
	return Settings{TTL: 10 * time.Second, Grace: 5 * time.Second, Safety: 2 * time.Second,
		MaxSkew: time.Second, HeartbeatPeriod: 3 * time.Second}
}

// Validate refuses inconsistent settings, each error naming the setting.
func (s Settings) Validate() error {
	switch {
	case s.TTL <= 0:
		return fmt.Errorf("cluster: ttl %v must be positive", s.TTL)
	case s.Grace < 0:
		return fmt.Errorf("cluster: grace %v must not be negative", s.Grace)
	case s.Safety <= 0:
		return fmt.Errorf("cluster: safety %v must be positive", s.Safety)
	case s.MaxSkew < 0:
		return fmt.Errorf("cluster: max_skew %v must not be negative", s.MaxSkew)
	case s.Safety >= s.TTL:
		return fmt.Errorf("cluster: safety %v must be below ttl %v (a lease would never be valid)", s.Safety, s.TTL)
	case s.Grace+s.Safety < 2*s.MaxSkew:
		return fmt.Errorf("cluster: grace %v + safety %v must be at least twice max_skew %v, or two nodes could own one actor under skew", s.Grace, s.Safety, s.MaxSkew)
	case s.HeartbeatPeriod < 0:
		return fmt.Errorf("cluster: heartbeat_period %v must not be negative", s.HeartbeatPeriod)
	case s.HeartbeatPeriod > s.TTL/3:
		return fmt.Errorf("cluster: heartbeat_period %v is above ttl / 3 (%v): a lease needs two retries before it runs out", s.HeartbeatPeriod, s.TTL/3)
	case s.AttemptTimeout() < time.Millisecond:
		return fmt.Errorf("cluster: ttl %v - safety %v leaves a write attempt under a millisecond", s.TTL, s.Safety)
	}
	return nil
}

// Period is the time from one lease write's send to the next's:
// min(heartbeat period, ttl / 3).
func (s Settings) Period() time.Duration {
	if s.HeartbeatPeriod == 0 {
		return s.TTL / 3
	}
	return min(s.HeartbeatPeriod, s.TTL/3)
}

// AttemptTimeout bounds one lease write or read: (ttl - safety) / 3.
func (s Settings) AttemptTimeout() time.Duration { return (s.TTL - s.Safety) / 3 }

// Validity is how long after its send an acknowledged write keeps the
// lease: ttl - safety.
func (s Settings) Validity() time.Duration { return s.TTL - s.Safety }

// Takeover is how long after a node's last written_at a peer may take its
// actors: ttl + grace.
func (s Settings) Takeover() time.Duration { return s.TTL + s.Grace }

// Horizon is how long after its written_at a live lease object counts
// as live for membership and trust: three heartbeat periods plus the
// allowed clock skew (10 s with the defaults), also for a node that cannot
// list the bucket.
func (s Settings) Horizon() time.Duration { return 3*s.Period() + s.MaxSkew }

// Watch is how long a peer must see a node's object unchanged before it
// may fence it: a lease period plus one attempt timeout.
func (s Settings) Watch() time.Duration { return s.Period() + s.AttemptTimeout() }
