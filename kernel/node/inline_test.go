package node

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
	"github.com/wasmkeep/wasmkeep/kernel/node/mailbox"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
)

// inlineActor is an actor of a node alone with what runInline, and the
// answer of an event that is skipped, read: the node's lock, options,
// clock and metrics, the actor's queue, turn and idle timer.
func inlineActor(clk clock.Clock) *actor {
	n := &Node{actors: map[string]*actor{}, clock: clk, opts: Options{IdleTimeout: time.Minute}, metrics: metrics.New(metrics.Gauges{})}
	a := &actor{node: n, key: "tenant/class/name", queue: mailbox.New[*event](4)}
	a.lastActive.Store(clk.Now().UnixNano())
	a.armIdle()
	return a
}

// TestRunInlineOnlyAFrontDoorRequestToAnIdleActor: runInline runs the
// front door's request at once only on a node alone, for an actor with
// nothing queued, nothing running and no admission evicting it; otherwise
// it leaves the node's lock held for the caller to queue the event. A
// request it runs is answered before it returns, with the lock and the turn
// released.
func TestRunInlineOnlyAFrontDoorRequestToAnIdleActor(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	request := func() *event {
		return &event{ctx: context.Background(), reply: make(chan outcome, 1), placed: true}
	}
	for _, tc := range []struct {
		name  string
		setup func(a *actor, ev *event)
	}{
		{"on a node with a bucket", func(a *actor, ev *event) { a.node.opts.Cluster = &Cluster{} }},
		{"an alarm, call or take", func(a *actor, ev *event) { ev.placed = false }},
		{"a WebSocket event", func(a *actor, ev *event) { ev.ws = &wsEvent{} }},
		{"behind a queued event", func(a *actor, ev *event) { a.queue.Push(request()) }},
		{"while an event runs", func(a *actor, ev *event) { a.turn.Lock() }},
		{"claimed by an admission", func(a *actor, ev *event) { a.claim = make(chan bool, 1) }},
	} {
		a, ev := inlineActor(clk), request()
		tc.setup(a, ev)
		a.node.mu.Lock()
		if a.runInline(ev) {
			t.Fatalf("%s: ran inline", tc.name)
		}
		if a.node.mu.TryLock() {
			t.Fatalf("%s: the node's lock was released", tc.name)
		}
		a.node.mu.Unlock()
		if len(ev.reply) != 0 || a.busy.Load() {
			t.Fatalf("%s: answered (%d) or busy (%v)", tc.name, len(ev.reply), a.busy.Load())
		}
	}

	// A request whose client left before it started is skipped: the one way
	// through handle that needs no instance or database.
	a, ev := inlineActor(clk), request()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev.ctx = ctx
	a.node.mu.Lock()
	if !a.runInline(ev) {
		t.Fatal("a front-door request to an idle actor was not run inline")
	}
	if !a.node.mu.TryLock() {
		t.Fatal("the node's lock is still held")
	}
	if !a.turn.TryLock() {
		t.Fatal("the actor's turn is still held")
	}
	select {
	case out := <-ev.reply:
		if !out.skipped {
			t.Fatalf("outcome %+v, want skipped", out)
		}
	default:
		t.Fatal("not answered when runInline returned")
	}
	if a.busy.Load() {
		t.Fatal("busy after the event")
	}
}

// TestIdleLeftCountsFromTheLastEvent: the idle timeout a fire taken late
// finds left is counted from the last event's end, which an event run
// inline moves without the actor's goroutine.
func TestIdleLeftCountsFromTheLastEvent(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	a := inlineActor(clk)
	clk.Advance(45 * time.Second)
	if got := a.idleLeft(); got != 15*time.Second {
		t.Fatalf("idleLeft %v after 45 s of a minute, want 15 s", got)
	}
	a.lastActive.Store(clk.Now().UnixNano()) // an event ended
	clk.Advance(10 * time.Second)
	if got := a.idleLeft(); got != 50*time.Second {
		t.Fatalf("idleLeft %v 10 s after an event, want 50 s", got)
	}
	clk.Advance(50 * time.Second)
	if got := a.idleLeft(); got > 0 {
		t.Fatalf("idleLeft %v once the timeout passed, want none", got)
	}
}

// TestNewActorsFirstRequestRunsInline: deliver runs a new actor's first
// front-door request on the caller's goroutine, answered when deliver
// returns, and starts the actor's goroutine after it, for what comes next
// (ADR 1066, amendment). A new incarnation of an actor still closing waits
// for it on its goroutine: its request is queued.
func TestNewActorsFirstRequestRunsInline(t *testing.T) {
	for _, closing := range []bool{false, true} {
		n, c := nodeAlone()
		if closing {
			n.closing[n.actorKey(c, "name")] = &actor{done: make(chan struct{})} // never done here
		}
		ev := skippedRequest()
		if err := n.deliver(context.Background(), c, "name", ev); err != nil {
			t.Fatal(err)
		}
		if answered := len(ev.reply) == 1; answered == closing {
			t.Errorf("a previous incarnation closing %v: answered when deliver returned %v", closing, answered)
		}
	}
}

// TestNewActorKeepsItsGoroutineAfterAPanic: a first request that panics
// where it ran inline (net/http recovers a handler's panic) still leaves
// the actor its goroutine, which answers what is queued next; without it
// the actor would stay registered with its slot, and Shutdown would wait
// for it.
func TestNewActorKeepsItsGoroutineAfterAPanic(t *testing.T) {
	n, c := nodeAlone()
	bad := skippedRequest()
	bad.ctx = nil // handle reads it first
	func() {
		defer func() { recover() }()
		n.deliver(context.Background(), c, "name", bad)
		t.Fatal("the first request did not panic")
	}()
	next := skippedRequest()
	n.mu.Lock()
	a := n.actors[n.actorKey(c, "name")]
	a.enqueue(next)
	n.mu.Unlock()
	select {
	case <-next.reply:
	case <-time.After(10 * time.Second):
		t.Fatal("a queued request was not answered: the actor has no goroutine")
	}
}

// nodeAlone is a node alone with what deliver needs to start an actor and
// skip its events, and a class.
func nodeAlone() (*Node, *class) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	n := &Node{
		actors: map[string]*actor{}, closing: map[string]*actor{}, clock: clk,
		opts:      Options{IdleTimeout: time.Minute, QueueLimit: 4, AdmissionWait: time.Minute},
		metrics:   metrics.New(metrics.Gauges{}),
		slots:     make(chan struct{}, 4),
		guestLogs: guestlog.NewSink(slog.New(slog.DiscardHandler), clk, 10),
	}
	return n, &class{name: "class"}
}

// skippedRequest is a front-door request whose client has left: the one
// way through handle that needs no instance or database.
func skippedRequest() *event {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &event{ctx: ctx, reply: make(chan outcome, 1), placed: true}
}
