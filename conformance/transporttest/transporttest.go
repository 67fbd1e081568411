// Package transporttest holds the rules every transport/v1 implementation
// must pass (issue 15, item 4), all of them on 127.0.0.1: bytes round-trip
// both ways; PeerOf names each end's peer; a peer outside the trusted set,
// or one proving another pin than the set's, is refused at Dial and at
// Listen; Trust dropping a peer, or changing its pin, cuts its open
// connections in both directions at once (a blocked Read returns), also
// one whose handshake raced with the call, and leaves other peers'
// connections alone; a peer trusted again works again; Close ends
// listeners and connections.
//
// A transport that does not authenticate (the kernel's plaintext one)
// declares it (Options.Unauthenticated): the suite then requires that it
// says so (Pin "", PeerOf ErrUnauthenticated) and skips what only
// authentication makes possible: refusing at Listen, telling pins apart,
// cutting accepted connections. By default a transport must authenticate.
//
// From go test, a transport's test calls Run with a factory that makes one
// node's transport, a new identity each call:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func() (transport.Transport, error) { return open() })
//	}
//
// Without testing.T (wasmkeep conformance transport), Check runs the same
// rules and reports each one passed, failed or skipped. Waits for what
// should happen at once are bounded (Options.Wait), never measured: no
// rule sleeps to assert anything.
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// Factory makes one node's transport, with an identity of its own (on a
// transport that authenticates, a new key and pin each call). The suite
// closes every transport it makes.
type Factory func() (transport.Transport, error)

// Options tune a run; zero fields take the defaults.
type Options struct {
	// Unauthenticated declares a transport that does not authenticate its
	// peers (the suite then requires Pin "" and skips the rules that need
	// authentication).
	Unauthenticated bool
	// Wait bounds each wait for something that should happen at once: a
	// Read on a cut connection returning, a listener ending (5 s). A
	// bound, not a measurement.
	Wait time.Duration
	// Rounds is how many times the race rule races Trust with handshakes
	// (20).
	Rounds int
	// Timeout bounds each rule (1 minute).
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Wait == 0 {
		o.Wait = 5 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 20
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return o
}

func (o Options) check() error {
	if o.Wait < 0 || o.Rounds < 0 || o.Timeout < 0 {
		return fmt.Errorf("transporttest: wait (%v), rounds (%d) and timeout (%v) must be positive", o.Wait, o.Rounds, o.Timeout)
	}
	return nil
}

// Rule is one rule of the contract.
type Rule struct {
	Name    string // a Go identifier: the subtest's name
	Summary string // what the rule checks, one line
	// Authenticated marks a rule that only a transport that authenticates
	// can keep; it is skipped for one declared Unauthenticated.
	Authenticated bool
	check         func(e *env) error
}

// Rules lists every rule, in the order Check and Run take them.
func Rules() []Rule { return slices.Clone(rules) }

// Result is one rule's outcome: Err is nil if it passed; Skipped, if not
// empty, says why the rule did not run.
type Result struct {
	Rule    Rule
	Err     error
	Skipped string
	Elapsed time.Duration
}

// Failed reports a broken rule.
func (r Result) Failed() bool { return r.Err != nil }

const skipUnauthenticated = "the transport does not authenticate its peers"

// Check runs every rule with transports from newTransport and returns each
// outcome, in order; report, if not nil, is called as each one ends. It
// stops early if ctx ends.
func Check(ctx context.Context, newTransport Factory, opts Options, report func(Result)) ([]Result, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	var out []Result
	for _, r := range rules {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		res := runRule(ctx, newTransport, opts, r)
		out = append(out, res)
		if report != nil {
			report(res)
		}
	}
	return out, nil
}

// T is what Run needs of a test: *testing.T has it. The package names no
// type of package testing, so that a command that runs Check does not link
// testing.
type T[Self any] interface {
	Run(name string, f func(t Self)) bool
	Context() context.Context
	Fatal(args ...any)
	Skip(args ...any)
}

// Run runs every rule as a subtest, each with transports of its own from
// newTransport.
func Run[Test T[Test]](t Test, newTransport Factory) {
	RunWith(t, newTransport, Options{})
}

// RunWith is Run with options.
func RunWith[Test T[Test]](t Test, newTransport Factory, opts Options) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		t.Run(r.Name, func(t Test) {
			res := runRule(t.Context(), newTransport, opts, r)
			switch {
			case res.Skipped != "":
				t.Skip(res.Skipped)
			case res.Err != nil:
				t.Fatal(res.Err)
			}
		})
	}
}

// runRule runs one rule on nodes of its own, and closes them after.
func runRule(ctx context.Context, newTransport Factory, opts Options, r Rule) Result {
	if r.Authenticated && opts.Unauthenticated {
		return Result{Rule: r, Skipped: skipUnauthenticated}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	e := &env{ctx: ctx, opts: opts, newTransport: newTransport}
	err := r.check(e)
	if cerr := e.close(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v: %w", opts.Timeout, err)
	}
	return Result{Rule: r, Err: err, Elapsed: time.Since(start)}
}
