package replication

import (
	"context"
	"sync"
)

// The node-wide caps on restore reads (restore step 6): at most NodeReads
// objects and NodeReadBytes of them at once by the listing's sizes, one read
// counting for at most ReadShareMax.
const (
	NodeReads     = 32
	NodeReadBytes = 256 << 20
	ReadShareMax  = 32 << 20
)

// Limiter is the node's share of restore reads: one for every restore of a
// node. Reads wait their turn first come, first served.
type Limiter struct {
	mu        sync.Mutex
	maxReads  int
	maxBytes  int64
	reads     int
	bytes     int64
	queue     []*ticket
	peakReads int
	peakBytes int64
}

type ticket struct {
	n     int64
	ready chan struct{}
}

// NewLimiter returns a limiter of reads reads and bytes bytes at once (the
// node's: NodeReads, NodeReadBytes).
func NewLimiter(reads int, bytes int64) *Limiter {
	return &Limiter{maxReads: max(reads, 1), maxBytes: max(bytes, 1)}
}

// share is what a read of size bytes counts for.
func (l *Limiter) share(size int64) int64 {
	return min(size, ReadShareMax, l.maxBytes)
}

func (l *Limiter) fits(n int64) bool {
	return l.reads < l.maxReads && l.bytes+n <= l.maxBytes
}

func (l *Limiter) take(n int64) {
	l.reads++
	l.bytes += n
	l.peakReads = max(l.peakReads, l.reads)
	l.peakBytes = max(l.peakBytes, l.bytes)
}

// acquire waits for a read of size bytes to have its turn; release gives it
// back.
func (l *Limiter) acquire(ctx context.Context, size int64) (release func(), err error) {
	n := l.share(size)
	release = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reads--
		l.bytes -= n
		l.grant()
	}
	l.mu.Lock()
	if len(l.queue) == 0 && l.fits(n) {
		l.take(n)
		l.mu.Unlock()
		return release, nil
	}
	t := &ticket{n: n, ready: make(chan struct{})}
	l.queue = append(l.queue, t)
	l.mu.Unlock()
	select {
	case <-t.ready:
		return release, nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		select {
		case <-t.ready: // granted meanwhile: give it back
			l.reads--
			l.bytes -= n
		default:
			for i, q := range l.queue {
				if q == t {
					l.queue = append(l.queue[:i], l.queue[i+1:]...)
					break
				}
			}
		}
		l.grant()
		return nil, ctx.Err()
	}
}

// grant hands turns to the waiting reads in order while they fit.
func (l *Limiter) grant() {
	for len(l.queue) > 0 && l.fits(l.queue[0].n) {
		t := l.queue[0]
		l.queue = l.queue[1:]
		l.take(t.n)
		close(t.ready)
	}
}

// InFlight is what is being read now.
func (l *Limiter) InFlight() (reads int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads, l.bytes
}

// Peak is the most read at once so far.
func (l *Limiter) Peak() (reads int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peakReads, l.peakBytes
}
