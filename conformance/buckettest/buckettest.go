// Package buckettest holds the rules every bucket/v1 provider must pass
// (issue 7): reads whole and ranged, version tokens, conditional creates,
// replaces and deletes, the errors that tell them apart, listings in byte
// order with pagination, every character the kernel puts in a key, objects
// of 0 bytes and of 64 MiB, writers racing on one create and one replace,
// and the start-time probe (bucket.Probe).
//
// From go test, a provider's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		buckettest.Run(t, func(t *testing.T) bucket.Bucket { return open(t) })
//	}
//
// Without testing.T (wasmkeep conformance bucket), Check runs the same
// rules and reports each one passed or failed.
//
// Every rule works under its own prefix inside the run's prefix
// (buckettest/<time>-<random>/<Rule>/ by default) and deletes what it wrote,
// so runs can share one bucket, a user's included. Nothing here looks at a
// provider's internals: every rule goes through the contract alone.
package buckettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Options tune a run; zero fields take the defaults (Quick's when Quick).
type Options struct {
	// Writers race on one create and on one replace, Rounds times each
	// (16 and 20; 4 and 3 when Quick).
	Writers, Rounds int
	// ListKeys is how many keys the listing rule writes (2,500; 300).
	ListKeys int
	// LargeSize is the large object's size in bytes (64 MiB; 4 MiB).
	LargeSize int64
	// Prefix is where the run writes, ending in "/": NewPrefix's by
	// default. Each rule writes under Prefix + its name + "/"; the probe
	// rule writes under probe/ (bucket.ProbePrefix), as a node does.
	Prefix string
	// Timeout bounds each rule (5 minutes).
	Timeout time.Duration
	// Quick picks small counts: the rules still run, on less data.
	Quick bool
}

func (o Options) withDefaults() Options {
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if o.Quick {
				*v = quick
			}
		}
	}
	def(&o.Writers, 16, 4)
	def(&o.Rounds, 20, 3)
	def(&o.ListKeys, 2500, 300)
	if o.LargeSize == 0 {
		o.LargeSize = 64 << 20
		if o.Quick {
			o.LargeSize = 4 << 20
		}
	}
	if o.Prefix == "" {
		o.Prefix = NewPrefix("buckettest/")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	return o
}

func (o Options) check() error {
	switch {
	case o.Writers < 2:
		return fmt.Errorf("buckettest: %d writers cannot race (at least 2)", o.Writers)
	case o.Rounds < 1 || o.ListKeys < 1 || o.LargeSize < 1 || o.Timeout < 0:
		return fmt.Errorf("buckettest: rounds (%d), list keys (%d) and large size (%d) must be positive", o.Rounds, o.ListKeys, o.LargeSize)
	}
	if !strings.HasSuffix(o.Prefix, "/") || len(o.Prefix) > maxPrefix {
		return fmt.Errorf("buckettest: prefix %q must end in / and be at most %d bytes (the rules' keys follow it)", o.Prefix, maxPrefix)
	}
	return bucket.CheckPrefix(o.Prefix)
}

// maxPrefix leaves room in a key for the longest names the rules append.
const maxPrefix = 512

// NewPrefix returns a prefix under base that no other run uses:
// base<time>-<random>/.
func NewPrefix(base string) string {
	var r [6]byte
	rand.Read(r[:])
	return base + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(r[:]) + "/"
}

// Rule is one rule of the contract.
type Rule struct {
	Name    string // a Go identifier: the subtest's name and the rule's prefix
	Summary string // what the rule checks, one line
	check   func(e *env) error
}

// Rules lists every rule, in the order Check and Run take them.
func Rules() []Rule { return slices.Clone(rules) }

// Result is one rule's outcome: Err is nil if it passed.
type Result struct {
	Rule    Rule
	Err     error
	Elapsed time.Duration
}

// Check runs every rule against b and returns each outcome, in order; report,
// if not nil, is called as each one ends. It stops early only if ctx ends.
func Check(ctx context.Context, b bucket.Bucket, opts Options, report func(Result)) ([]Result, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	var out []Result
	for _, r := range rules {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		res := runRule(ctx, b, opts, r)
		out = append(out, res)
		if report != nil {
			report(res)
		}
	}
	return out, nil
}

// Run runs every rule as a subtest; newBucket is called once per rule (a
// bucket it returns is its own to close, with t.Cleanup).
func Run(t *testing.T, newBucket func(t *testing.T) bucket.Bucket) {
	RunWith(t, newBucket, Options{})
}

// RunWith is Run with options.
func RunWith(t *testing.T, newBucket func(t *testing.T) bucket.Bucket, opts Options) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		t.Run(r.Name, func(t *testing.T) {
			if res := runRule(t.Context(), newBucket(t), opts, r); res.Err != nil {
				t.Fatal(res.Err)
			}
		})
	}
}

// runRule runs one rule under its own prefix and then deletes what is left
// there; a rule that passed but leaves objects behind fails.
func runRule(ctx context.Context, b bucket.Bucket, opts Options, r Rule) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	e := &env{ctx: ctx, b: b, opts: opts, prefix: opts.Prefix + r.Name + "/"}
	err := r.check(e)
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("timed out after %v: %w", opts.Timeout, err)
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer ccancel()
	if cerr := DeleteAll(cctx, b, e.prefix); cerr != nil && err == nil {
		err = fmt.Errorf("deleting what the rule wrote under %s: %w", e.prefix, cerr)
	}
	return Result{Rule: r, Err: err, Elapsed: time.Since(start)}
}

// DeleteAll deletes every object under prefix, a page at a time, until
// none is listed. It trusts List no further than that: the rules judge it.
func DeleteAll(ctx context.Context, b bucket.Bucket, prefix string) error {
	for round := 0; ; round++ {
		page, err := b.List(ctx, prefix, bucket.ListOptions{})
		if err != nil {
			return fmt.Errorf("List %s: %w", prefix, err)
		}
		if len(page.Entries) == 0 {
			return nil
		}
		if round == 100 {
			return fmt.Errorf("%s still listed after 100 rounds of deletes", page.Entries[0].Key)
		}
		for _, en := range page.Entries {
			if err := b.Delete(ctx, en.Key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
				return fmt.Errorf("Delete %s: %w", en.Key, err)
			}
		}
	}
}
