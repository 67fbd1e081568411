// Package faulty wraps a bucket with the faults a real store shows, for the
// cluster protocols' tests: a request that fails before it is applied, a
// reply lost after the write landed, a request that hangs until its caller
// gives up (applied or not), and a write held in flight that lands later,
// its condition judged when it lands. Faults are queued for the next
// matching calls (Next) or drawn from a seeded source (Random), so a run
// repeats exactly.
package faulty

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Op is the operation a fault applies to.
type Op string

const (
	Get Op = "get"
	Put Op = "put"
)

// Kind is one fault.
type Kind int

const (
	// None lets the call through.
	None Kind = iota
	// Fail returns a transient error; nothing is applied.
	Fail
	// LostReply applies the call, then returns a transient error.
	LostReply
	// Hang blocks until the caller's context is done; nothing is applied.
	Hang
	// Hold blocks a Put until the caller's context is done and keeps it:
	// it lands at Land, its condition judged then. A Get is not held.
	Hold
)

// ErrInjected is what a failed or lost call wraps (with
// bucket.ErrTransient).
var ErrInjected = errors.New("faulty: injected fault")

type rule struct {
	op     Op
	prefix string
	kind   Kind
}

type held struct {
	key  string
	data []byte
	cond bucket.Condition
}

// Bucket is the wrapper; it is safe for concurrent use.
type Bucket struct {
	inner bucket.Bucket
	mu    sync.Mutex
	rules []rule
	rng   *rand.Rand
	rates map[Kind]float64
	held  []held
	cut   bool
	// Counts of what happened, for tests that must prove a fault occurred.
	Counts map[Kind]int
	// Landed is how many held writes were applied by Land.
	Landed int
}

var _ bucket.Bucket = (*Bucket)(nil)

// New wraps inner with no fault armed.
func New(inner bucket.Bucket) *Bucket {
	return &Bucket{inner: inner, Counts: map[Kind]int{}}
}

// Next arms kind for the next call of op on a key starting with prefix;
// armed faults apply in the order armed.
func (b *Bucket) Next(op Op, prefix string, kind Kind) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rules = append(b.rules, rule{op, prefix, kind})
}

// Cut partitions the caller from the store (or ends it): while cut, every
// call hangs until its context is done and nothing is applied.
func (b *Bucket) Cut(cut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = cut
}

// Clear disarms every fault armed by Next.
func (b *Bucket) Clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rules = nil
}

// Random draws a fault for every call not matched by Next, each kind with
// its probability, from a source seeded with seed.
func (b *Bucket) Random(seed uint64, rates map[Kind]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b.rates = rates
}

func (b *Bucket) pick(op Op, key string) Kind {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut {
		return Hang
	}
	k := None
	for i, r := range b.rules {
		if r.op == op && strings.HasPrefix(key, r.prefix) {
			k = r.kind
			b.rules = append(b.rules[:i], b.rules[i+1:]...)
			b.Counts[k]++
			return k
		}
	}
	if b.rng != nil {
		x := b.rng.Float64()
		for _, c := range []Kind{Fail, LostReply, Hang, Hold} {
			if x < b.rates[c] {
				k = c
				break
			}
			x -= b.rates[c]
		}
	}
	if op == Get && k == Hold {
		k = Hang
	}
	b.Counts[k]++
	return k
}

func injected(op Op, key string, what string) error {
	return fmt.Errorf("%s %s: %s: %w (%w)", op, key, what, ErrInjected, bucket.ErrTransient)
}

// Held is how many writes are held, not yet landed.
func (b *Bucket) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// Land applies every held write in the order held, each under its own
// condition as it is judged now; it returns how many landed.
func (b *Bucket) Land() int {
	b.mu.Lock()
	hs := b.held
	b.held = nil
	b.mu.Unlock()
	n := 0
	for _, h := range hs {
		if _, err := b.inner.Put(context.Background(), h.key, bytes.NewReader(h.data), int64(len(h.data)), h.cond); err == nil {
			n++
		}
	}
	b.mu.Lock()
	b.Landed += n
	b.mu.Unlock()
	return n
}

// Drop forgets every held write: they never land.
func (b *Bucket) Drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = nil
}

func (b *Bucket) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	switch b.pick(Get, key) {
	case Fail:
		return nil, injected(Get, key, "failed")
	case LostReply:
		if o, err := b.inner.Get(ctx, key, opts); err == nil {
			o.Body.Close()
		}
		return nil, injected(Get, key, "reply lost")
	case Hang, Hold:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.inner.Get(ctx, key, opts)
}

func (b *Bucket) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	data, err := io.ReadAll(bucket.SizedBody(body, size))
	if err != nil {
		return "", err
	}
	switch b.pick(Put, key) {
	case Fail:
		return "", injected(Put, key, "failed")
	case LostReply:
		b.inner.Put(ctx, key, bytes.NewReader(data), size, cond) //nolint:errcheck // the reply is what is lost
		return "", injected(Put, key, "reply lost")
	case Hang:
		<-ctx.Done()
		return "", ctx.Err()
	case Hold:
		b.mu.Lock()
		b.held = append(b.held, held{key, data, cond})
		b.mu.Unlock()
		<-ctx.Done()
		return "", ctx.Err()
	}
	return b.inner.Put(ctx, key, bytes.NewReader(data), size, cond)
}

func (b *Bucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	return b.inner.Delete(ctx, key, cond)
}

func (b *Bucket) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	return b.inner.List(ctx, prefix, opts)
}

func (b *Bucket) Close() error { return b.inner.Close() }
