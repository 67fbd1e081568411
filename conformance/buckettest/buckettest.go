// Package buckettest holds the rules every bucket/v1 provider must pass
// (issue 7): reads whole and ranged, version tokens, conditional creates
// and replaces, deletes, the errors that tell them apart, listings that
// return every key once with pagination, every character the kernel puts
// in a key, objects of 0 bytes and of 64 MiB, writers racing on one create
// and one replace, and the start-time probe (bucket.Probe). It also reports
// two capabilities that it does not require, because the kernel does not
// rely on them (package bucket): conditional deletes, and listings in byte
// order across "/". MinIO, for one, has neither.
//
// From go test, a provider's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		buckettest.Run(t, func(t *testing.T) bucket.Bucket { return open(t) })
//	}
//
// Without testing.T (wasmkeep conformance bucket), Check runs the same
// rules and reports each one passed or failed, and each capability present
// or lacking. A bucket that cannot be listed at all (missing, unreachable,
// credentials refused) fails every rule for one reason: both stop there and
// say it once (ErrUnusable).
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
	// RequireCapabilities makes RunWith fail, rather than skip, a
	// capability the provider lacks: for a provider that offers them all.
	// Check reports capabilities the same either way.
	RequireCapabilities bool
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

// Rule is one rule of the contract, or a capability: a behaviour the suite
// reports but does not require.
type Rule struct {
	Name    string // a Go identifier: the subtest's name and the rule's prefix
	Summary string // what the rule checks, one line
	// Capability marks a behaviour a provider may lack and still conform;
	// Without says why the kernel does not need it.
	Capability bool
	Without    string
	check      func(e *env) error
	sizes      func(Options) string // the run's counts, for Describe
}

// Describe is the rule's summary with the counts and sizes opts give it.
func (r Rule) Describe(opts Options) string {
	if r.sizes == nil {
		return r.Summary
	}
	return r.Summary + " (" + r.sizes(opts.withDefaults()) + ")"
}

// Rules lists every rule, then every capability, in the order Check and
// Run take them.
func Rules() []Rule { return slices.Clone(rules) }

// Result is one rule's outcome: Err is nil if it passed (for a capability:
// if the provider has it). Summary is the rule's, described for the run.
type Result struct {
	Rule    Rule
	Summary string
	Err     error
	Elapsed time.Duration
}

// Failed reports a broken rule; a lacking capability is not one.
func (r Result) Failed() bool { return r.Err != nil && !r.Rule.Capability }

// ErrUnusable: the bucket could not be listed, so every rule would fail for
// that one reason; the run stopped.
var ErrUnusable = errors.New("buckettest: the bucket cannot be used, so no further rule was run")

// usable lists the run's prefix, as every rule does: a failure there is the
// root cause of every failure to come.
func usable(ctx context.Context, b bucket.Bucket, prefix string) error {
	if _, err := b.List(ctx, prefix, bucket.ListOptions{Limit: 1}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: List %s: %w", ErrUnusable, prefix, err)
	}
	return nil
}

// Check runs every rule against b and returns each outcome, in order; report,
// if not nil, is called as each one ends. It stops early if ctx ends, and
// with an error wrapping ErrUnusable if the bucket cannot be listed, at the
// start or after a rule failed.
func Check(ctx context.Context, b bucket.Bucket, opts Options, report func(Result)) ([]Result, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := usable(ctx, b, opts.Prefix); err != nil {
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
		if res.Err != nil {
			if err := usable(ctx, b, opts.Prefix); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// T is what Run needs of a test: *testing.T has it. The package names
// no type of package testing, so that a server that runs Check (wasmkeep
// conformance bucket) does not link testing.
type T[Self any] interface {
	Run(name string, f func(t Self)) bool
	Context() context.Context
	Fatal(args ...any)
	Skipf(format string, args ...any)
}

// Run runs every rule as a subtest; newBucket is called once per rule (a
// bucket it returns is its own to close, with t.Cleanup).
func Run[Test T[Test]](t Test, newBucket func(t Test) bucket.Bucket) {
	RunWith(t, newBucket, Options{})
}

// RunWith is Run with options.
func RunWith[Test T[Test]](t Test, newBucket func(t Test) bucket.Bucket, opts Options) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		t.Fatal(err)
	}
	var stopped error // ErrUnusable, once a rule's failure shows it
	for _, r := range rules {
		t.Run(r.Name, func(t Test) {
			if stopped != nil {
				t.Skipf("not run: %v", stopped)
			}
			b := newBucket(t)
			res := runRule(t.Context(), b, opts, r)
			switch {
			case res.Err == nil:
			case r.Capability && !opts.RequireCapabilities:
				t.Skipf("lacks this capability: %v; %s", res.Err, r.Without)
			default:
				stopped = usable(t.Context(), b, opts.Prefix)
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
	return Result{Rule: r, Summary: r.Describe(opts), Err: err, Elapsed: time.Since(start)}
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
