package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// attempts is how many times on-alarm ran for actor name.
func attempts(n *testNode, name string) int {
	n.t.Helper()
	_, body := n.do("POST", "/actor/probe/"+name+"/query", "SELECT count(*) FROM alarm_attempts")
	v, err := strconv.Atoi(strings.TrimPrefix(body, "ok "))
	if err != nil {
		return 0 // no attempt yet: the table does not exist
	}
	return v
}

// waitFor polls until cond holds, for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestAlarmSetGetClearAndFire(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	n.expect("GET", "/actor/probe/a/alarm-get", "", 200, "none")
	n.expect("GET", "/actor/probe/a/alarm-set?in=60000", "", 200, "set")
	_, body := n.do("GET", "/actor/probe/a/alarm-get", "")
	if in, err := strconv.Atoi(strings.TrimPrefix(body, "in ")); err != nil || in < 55000 || in > 60000 {
		t.Errorf("get-alarm after set: %q", body)
	}
	n.expect("GET", "/actor/probe/a/alarm-clear", "", 200, "cleared")
	n.expect("GET", "/actor/probe/a/alarm-get", "", 200, "none")

	// An alarm in the past fires as soon as possible, once, and is cleared.
	n.expect("GET", "/actor/probe/b/alarm-set?in=-1000", "", 200, "set")
	waitFor(t, 10*time.Second, "the alarm", func() bool { return attempts(n, "b") == 1 })
	n.expect("GET", "/actor/probe/b/alarm-get", "", 200, "none")
	m.Advance(time.Hour) // a retry, or a second firing, would be due by then
	if got := attempts(n, "b"); got != 1 {
		t.Errorf("on-alarm ran %d times, want 1", got)
	}
}

// An on-alarm that sets the alarm again to the millisecond that fired gets
// it again: the host clears only an alarm the handler left alone.
func TestAlarmSetAgainToTheSameTime(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	n.expect("POST", "/actor/probe/a/exec", "CREATE TABLE alarm_again (n INTEGER)", 200, "ok 0")
	n.expect("POST", "/actor/probe/a/exec", "INSERT INTO alarm_again VALUES (2)", 200, "ok 1")
	n.expect("GET", "/actor/probe/a/alarm-set?in=-1000", "", 200, "set")
	waitFor(t, 10*time.Second, "three firings", func() bool { return attempts(n, "a") == 3 })
	waitFor(t, 5*time.Second, "the alarm to clear", func() bool {
		_, body := n.do("GET", "/actor/probe/a/alarm-get", "")
		return body == "none"
	})
	m.Advance(time.Hour)
	if got := attempts(n, "a"); got != 3 {
		t.Errorf("on-alarm ran %d times, want 3", got)
	}
}

// An alarm due while the node is down fires after a restart, even for an
// actor that is not woken otherwise; a hibernated actor's alarm wakes it.
func TestAlarmSurvivesRestartAndHibernation(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}, IdleTimeout: 200 * time.Millisecond}
	n := startNode(t, opts)
	n.expect("GET", "/actor/probe/sleeper/alarm-set?in=1500", "", 200, "set")
	n.expect("GET", "/actor/probe/restart/alarm-set?in=500", "", 200, "set")
	n.stop()

	// The node comes back a second later on its clock: past the second
	// alarm, which fell due while it was down; the first is due soon after.
	m := clock.NewManual(time.Now().Add(time.Second))
	opts.Clock = m
	n = startNode(t, opts)
	// Neither actor gets a request until both have fired: the timer found them.
	fired := func() float64 { return n.metric(`wasmkeep_events_total{class="probe",kind="alarm",outcome="ok"}`) }
	waitFor(t, 10*time.Second, "the alarm due while the node was down", func() bool { return fired() >= 1 })
	m.Advance(time.Second)
	waitFor(t, 10*time.Second, "both alarms", func() bool { return fired() == 2 })
	for _, name := range []string{"restart", "sleeper"} {
		if got := attempts(n, name); got != 1 {
			t.Errorf("%s: on-alarm ran %d times, want 1", name, got)
		}
	}
}

// A failing on-alarm is retried after 1 s, then 2 s, ...; get-alarm shows the
// next attempt, and the count survives a restart.
func TestAlarmRetriesWithBackoff(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}}
	n := startNode(t, opts)
	n.expect("POST", "/actor/probe/a/exec", "CREATE TABLE fail_alarm (x)", 200, "ok 0")
	n.expect("GET", "/actor/probe/a/alarm-set?in=0", "", 200, "set")
	waitFor(t, 10*time.Second, "the first attempt", func() bool { return attempts(n, "a") >= 1 })
	_, body := n.do("GET", "/actor/probe/a/alarm-get", "")
	if in, err := strconv.Atoi(strings.TrimPrefix(body, "in ")); err != nil || in < 0 || in > 1000 {
		t.Fatalf("get-alarm after the first failure: %q, want the retry within 1 s", body)
	}
	waitFor(t, 10*time.Second, "the second attempt", func() bool { return attempts(n, "a") >= 2 })
	n.stop()

	n = startNode(t, opts)
	_, body = n.do("GET", "/actor/probe/a/alarm-get", "")
	if in, err := strconv.Atoi(strings.TrimPrefix(body, "in ")); err != nil || in < 0 || in > 2000 {
		t.Fatalf("get-alarm after a restart: %q, want the third attempt within 2 s (backoff kept)", body)
	}
	n.expect("POST", "/actor/probe/a/exec", "DROP TABLE fail_alarm", 200, "ok 0")
	waitFor(t, 10*time.Second, "the succeeding attempt", func() bool { return attempts(n, "a") >= 3 })
	waitFor(t, 5*time.Second, "the alarm to clear", func() bool {
		_, body := n.do("GET", "/actor/probe/a/alarm-get", "")
		return body == "none"
	})
}

// indexedAt is the time the node's alarm index (its file) lists for the
// probe's actor name, or false if it lists none: its last record wins.
func indexedAt(t *testing.T, dataDir, name string) (int64, bool) {
	t.Helper()
	data, err := os.ReadFile(alarmIndexFile(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	var ok bool
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, " ", 5) // crc, S or C, at, class, quoted name
		if len(f) == 5 && f[3] == "probe" && f[4] == strconv.Quote(name) {
			at, _ = strconv.ParseInt(f[2], 10, 64)
			ok = f[1] == "S"
		}
	}
	return at, ok
}

// A failing on-alarm's retry follows ADR 0009, decision 3, on a manual
// clock the test moves: an alarm the handler left at the time that fired
// (the one that ran, the same time set again) moves to the retry time; one
// it set for another time, however soon, stands (no sooner than
// alarm.RetryFloor; the book moves one before the retry time too, the
// SDK's workflows keep their own watchdog), and a clear stands.
// The failure count goes on through a failed run that sets the alarm (a
// handler that reschedules itself and fails backs off: 1 s, then 2 s), and
// a set outside a failed run starts it again. The node's alarm index lists
// the retry time. The actors hibernate between their first and second
// attempts: the count is read from the database.
func TestAlarmRetryRules(t *testing.T) {
	n, m := newManualNode(t, node.Options{IdleTimeout: 500 * time.Millisecond})
	ms := func(v int64) string { return strconv.FormatInt(v, 10) }
	path := func(name, p string) string { return "/actor/probe/" + name + "/" + p }
	exec := func(name, sql string) {
		t.Helper()
		if code, body := n.do("POST", path(name, "exec"), sql); code != 200 || !strings.HasPrefix(body, "ok ") {
			t.Fatalf("%s: %s: %d %q", name, sql, code, body)
		}
	}
	wantAt := func(name, want string) {
		t.Helper()
		if _, body := n.do("GET", path(name, "alarm-get?at=1"), ""); body != want {
			t.Errorf("%s: get-alarm %q, want %q", name, body, want)
		}
	}
	waitAttempts := func(k int, names ...string) {
		t.Helper()
		for _, name := range names {
			waitFor(t, 10*time.Second, name+"'s attempt "+strconv.Itoa(k), func() bool { return attempts(n, name) == k })
		}
	}

	// Each on-alarm fails, after setting the alarm in_ms past the time
	// that fired (NULL: clearing it); plain leaves it alone. All fall due
	// at t0.
	t0 := m.Now().UnixMilli()
	then := map[string]string{"same": "0", "soon": "500", "later": "5000", "cleared": "NULL", "plain": ""}
	for name, in := range then {
		exec(name, "CREATE TABLE fail_alarm (x)")
		if in != "" {
			exec(name, "CREATE TABLE alarm_then (in_ms)")
			exec(name, "INSERT INTO alarm_then VALUES ("+in+")")
		}
		n.expect("GET", path(name, "alarm-set?at="+ms(t0)), "", 200, "set")
	}
	waitAttempts(1, "same", "soon", "later", "cleared", "plain")
	for _, name := range []string{"same", "plain"} {
		wantAt(name, "at "+ms(t0+1000))
	}
	// A time the handler chose past the one that fired stands, however
	// soon (a workflow's watchdog backs off from 100 ms in the tests).
	wantAt("soon", "at "+ms(t0+500))
	n.expect("GET", path("soon", "alarm-clear"), "", 200, "cleared")
	wantAt("later", "at "+ms(t0+5000))
	wantAt("cleared", "none")

	// The second attempts: 2 s after them, whatever the handler set before
	// it failed (a count reset by its set would retry after 1 s, and one
	// that did not move the same time would fire in a loop).
	exec("later", "DELETE FROM alarm_then")
	m.Advance(600 * time.Millisecond)
	waitFor(t, 10*time.Second, "the actors to hibernate", func() bool { return n.metric("wasmkeep_actors_resident") == 0 })
	m.Advance(400 * time.Millisecond)
	waitAttempts(2, "same", "plain")
	for _, name := range []string{"same", "plain"} {
		wantAt(name, "at "+ms(t0+3000))
	}
	if at, ok := indexedAt(t, n.dataDir, "same"); !ok || at != t0+3000 {
		t.Errorf("the alarm index lists same at %d (%v), want the retry time %d", at, ok, t0+3000)
	}
	// A set outside a failed run starts the count again: 1 s.
	n.expect("GET", path("plain", "alarm-set?at="+ms(t0+1000)), "", 200, "set")
	waitAttempts(3, "plain")
	wantAt("plain", "at "+ms(t0+2000))

	// The alarm set later fired at its time, its failure the second in a
	// row: 2 s.
	m.Advance(4 * time.Second)
	waitAttempts(2, "later")
	wantAt("later", "at "+ms(t0+7000))
	if got := attempts(n, "cleared"); got != 1 {
		t.Errorf("the handler that cleared its alarm and failed ran %d times, want 1", got)
	}
}
