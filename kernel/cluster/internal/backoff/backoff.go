// Package backoff remembers the one thing a follower failed to take (an
// app's version that did not load, a secrets object that did not open)
// and when it may be tried again: the poll period doubled per failure in
// a row, up to a ceiling. Another thing is tried at once (a fix, a
// rollback, a newer seq).
package backoff

import "time"

// Failed is the last thing that failed, keyed by K; its zero value holds
// none.
type Failed[K comparable] struct {
	held    bool
	key     K
	err     error
	tries   int
	retryAt time.Time
}

// Waiting returns key's last error while its wait has not ended at now.
func (f *Failed[K]) Waiting(key K, now time.Time) (error, bool) {
	if f.held && key == f.key && now.Before(f.retryAt) {
		return f.err, true
	}
	return nil, false
}

// Record notes that key failed with err at now: it waits period doubled
// per failure of key in a row, up to ceiling.
func (f *Failed[K]) Record(key K, err error, now time.Time, period, ceiling time.Duration) {
	if !f.held || key != f.key {
		*f = Failed[K]{held: true, key: key}
	}
	f.tries++
	wait := period
	for range f.tries {
		wait = min(2*wait, ceiling)
	}
	f.err, f.retryAt = err, now.Add(wait)
}

// Clear forgets the failure: what failed was taken, or is gone.
func (f *Failed[K]) Clear() { *f = Failed[K]{} }
