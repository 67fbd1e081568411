// Package delay is the time arithmetic the SDK's patterns share (the
// queue's and the workflow runner's delays, timeouts and backoffs), in
// milliseconds.
package delay

// Max bounds every duration the patterns add to a time or carry on the
// wire: 2^40 ms, about 34 years, "for ever" enough, so that no sum
// overflows into the past (a retention of math.MaxInt64 must not delete an
// instance at once).
const Max = 1 << 40

// Bound is d within [0, Max].
func Bound(d int64) int64 { return min(max(d, 0), Max) }

// After is the time d milliseconds after t, d bounded.
func After(t, d int64) int64 { return t + Bound(d) }

// Backoff is the wait after the nth failed attempt (n >= 1): first,
// doubling with each attempt, at most most (both bounded).
func Backoff(first, most int64, n int) int64 {
	d, most := Bound(first), Bound(most)
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}
