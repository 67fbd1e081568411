package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// newManualNode starts a node serving the probe and room guests on a
// manual clock reading the wall clock's time once the node is up (the
// guests read the wall clock: alarms they set "in 1000 ms" are then 1000 ms
// ahead of the manual clock, give or take the few milliseconds the test
// takes).
func newManualNode(t *testing.T, opts node.Options) (*testNode, *clock.Manual) {
	t.Helper()
	start := time.Now()
	m := clock.NewManual(start)
	opts.Clock = m
	opts.Classes = map[string]string{"probe": probe(t), "room": room(t)}
	n := startNode(t, opts)
	m.Advance(time.Since(start))
	return n, m
}

// An actor hibernates after IdleTimeout without events, counted on the
// node's clock from the end of its last event: not a moment before.
func TestIdleHibernationOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{IdleTimeout: time.Hour}) // which the wall clock would not reach in a test
	resident := func() float64 { return n.metric("wasmkeep_actors_resident") }
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	m.Advance(59 * time.Minute)
	if got := resident(); got != 1 {
		t.Fatalf("%v actors resident before the idle timeout, want 1", got)
	}
	n.expect("GET", "/actor/probe/a/hits", "", 200, "2") // the same instance; the timeout starts again
	m.Advance(59 * time.Minute)
	n.expect("GET", "/actor/probe/a/hits", "", 200, "3")
	m.Advance(time.Hour)
	waitFor(t, time.Minute, "the idle actor to hibernate", func() bool { return resident() == 0 })
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1") // a new instance
}

// Due alarms fire in the order of their times on the node's clock, and not
// before it reaches them (hours ahead: the wall clock would not reach them
// in a test).
func TestAlarmOrderOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	for name, in := range map[string]time.Duration{"a": 3 * time.Hour, "b": time.Hour, "c": 2 * time.Hour} {
		n.expect("GET", fmt.Sprintf("/actor/probe/%s/alarm-set?in=%d", name, in.Milliseconds()), "", 200, "set")
	}
	check := func(want map[string]int) {
		t.Helper()
		for name, w := range want {
			if w > 0 {
				waitFor(t, time.Minute, "the alarm of "+name, func() bool { return attempts(n, name) >= w })
			}
			if got := attempts(n, name); got != w {
				t.Fatalf("%s: %d attempts, want %d (all: %v)", name, got, w, want)
			}
		}
	}
	check(map[string]int{"a": 0, "b": 0, "c": 0})
	m.Advance(90 * time.Minute)
	check(map[string]int{"b": 1, "a": 0, "c": 0})
	m.Advance(time.Hour)
	check(map[string]int{"c": 1, "a": 0, "b": 1})
	m.Advance(time.Hour)
	check(map[string]int{"a": 1, "b": 1, "c": 1})
}

// A failing on-alarm is tried again 1 s later, then 2 s after that, on the
// node's clock; once it succeeds the alarm is gone. The alarm is an hour
// ahead, so the retries are too: the wall clock would reach none of them.
func TestAlarmRetryOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	n.expect("POST", "/actor/probe/r/exec", "CREATE TABLE fail_alarm (x)", 200, "ok 0")
	n.expect("GET", "/actor/probe/r/alarm-set?in=3600000", "", 200, "set")
	m.Advance(time.Hour + 500*time.Millisecond) // the first attempt fails
	waitFor(t, time.Minute, "the first attempt", func() bool { return attempts(n, "r") == 1 })
	m.Advance(900 * time.Millisecond) // 0.9 s of the 1 s backoff
	if got := attempts(n, "r"); got != 1 {
		t.Fatalf("%d attempts before the retry was due, want 1", got)
	}
	m.Advance(200 * time.Millisecond) // the second attempt fails: the next waits 2 s
	waitFor(t, time.Minute, "the second attempt", func() bool { return attempts(n, "r") == 2 })
	if _, body := n.do("POST", "/actor/probe/r/exec", "DROP TABLE fail_alarm"); !strings.HasPrefix(body, "ok ") {
		t.Fatalf("DROP TABLE fail_alarm: %q", body)
	}
	m.Advance(1900 * time.Millisecond)
	if got := attempts(n, "r"); got != 2 {
		t.Fatalf("%d attempts before the second retry was due, want 2", got)
	}
	m.Advance(200 * time.Millisecond) // the third succeeds
	waitFor(t, time.Minute, "the third attempt", func() bool { return attempts(n, "r") == 3 })
	n.expect("GET", "/actor/probe/r/alarm-get", "", 200, "none")
}
