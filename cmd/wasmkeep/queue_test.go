package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// The queue (sdk/go/queue, issue 17 item 2) against a real server: the test
// queue class (testdata/guests/queueclass: visibility 300 ms, three
// attempts, backoff 250 ms doubling to 1 s, batches of 2, queue/push.app
// pushing to app/consumer) and a client actor "app" with the same routes in
// every SDK, so that the C client passes the Go client's contract.

func queueClientGuests() []sdkGuest {
	return []sdkGuest{
		{"go", func(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient", "") }},
		{"c", func(t testing.TB) string { return buildCGuest(t, "cmd/wasmkeep/testdata/guests/cqueueclient") }},
	}
}

func startQueueNode(t *testing.T, app string) *testNode {
	return startNode(t, node.Options{
		Classes: map[string]string{"queue": buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclass", ""), "app": app},
		Access:  map[string]access.Access{"queue": mustAccess(t, "internal")},
	})
}

// until polls a request until it answers 200 with want.
func (tn *testNode) until(method, path, body, want string) {
	tn.t.Helper()
	var got string
	var code int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, got = tn.do(method, path, body); code == 200 && got == want {
			return
		}
		if time.Now().After(deadline) {
			tn.t.Fatalf("%s %s: still %d %q, want %q", method, path, code, got, want)
		}
	}
}

func TestQueueContract(t *testing.T) {
	for _, g := range queueClientGuests() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			n := startQueueNode(t, g.build(t))
			app := func(route, q string) string { return "/actor/app/a/" + route + "?q=queue/" + q }

			t.Run("send, lease, ack", func(t *testing.T) {
				n.expect("POST", app("send", "basic"), "hello", 200, "1")
				n.expect("POST", app("send", "basic"), "world", 200, "2")
				n.expect("GET", app("lease", "basic")+"&max=10&vis=10000", "", 200, "1 1 hello\n2 1 world\n")
				n.expect("GET", app("lease", "basic"), "", 200, "")
				n.expect("GET", app("ack", "basic")+"&id=1&attempt=1", "", 200, "current")
				n.expect("GET", app("ack", "basic")+"&id=1&attempt=1", "", 200, "stale")
				n.expect("GET", app("stats", "basic"), "", 200, "ready 0 delayed 0 inflight 1 dead 0")
				n.expect("GET", app("ack", "basic")+"&id=2&attempt=1", "", 200, "current")
				n.expect("GET", app("stats", "basic"), "", 200, "ready 0 delayed 0 inflight 0 dead 0")
				// Ids are never reused.
				n.expect("POST", app("send", "basic"), "again", 200, "3")
			})

			t.Run("batch, all or none", func(t *testing.T) {
				n.expect("POST", app("batch", "batch"), "a\nb\nc", 200, "1 2 3")
				n.expect("POST", app("batch", "batch"), strings.Repeat("x\n", 1000)+"x", 200,
					"error refused 400: queue: send: a send carries 1 to 1000 messages, not 1001")
				n.expect("POST", app("batch", "batch"), strings.Repeat("y\n", 999)+"y", 200, ids(4, 1003))
				n.expect("GET", app("stats", "batch"), "", 200, "ready 1003 delayed 0 inflight 0 dead 0")
				n.expect("GET", app("lease", "batch")+"&max=2", "", 200, "1 1 a\n2 1 b\n")
				n.expect("GET", app("lease", "batch"), "", 200, "3 1 c\n4 1 y\n") // 0: the queue's batch size
				n.expect("GET", app("lease", "batch")+"&max=1001", "", 200,
					"error refused 400: queue: lease: max or visibility out of range")
			})

			t.Run("a delayed send is invisible until due", func(t *testing.T) {
				n.expect("POST", app("send", "delayed")+"&delay=1000", "later", 200, "1")
				n.expect("GET", app("lease", "delayed"), "", 200, "")
				n.expect("GET", app("stats", "delayed"), "", 200, "ready 0 delayed 1 inflight 0 dead 0")
				n.until("GET", app("lease", "delayed"), "", "1 1 later\n")
			})

			t.Run("a consumer that never acks gets the message again", func(t *testing.T) {
				n.expect("POST", app("send", "redeliver"), "x", 200, "1")
				n.expect("GET", app("lease", "redeliver")+"&vis=1000", "", 200, "1 1 x\n")
				n.expect("GET", app("lease", "redeliver"), "", 200, "")
				n.until("GET", app("lease", "redeliver")+"&vis=10000", "", "1 2 x\n") // same id, higher attempt
				// The first lease is stale: its ack and retry do nothing.
				n.expect("GET", app("ack", "redeliver")+"&id=1&attempt=1", "", 200, "stale")
				n.expect("GET", app("retry", "redeliver")+"&id=1&attempt=1", "", 200, "stale")
				n.expect("GET", app("stats", "redeliver"), "", 200, "ready 0 delayed 0 inflight 1 dead 0")
				n.expect("GET", app("ack", "redeliver")+"&id=1&attempt=2", "", 200, "current")
				// An ack after the lease ran out is stale too, even before another lease.
				n.expect("POST", app("send", "redeliver"), "y", 200, "2")
				n.expect("GET", app("lease", "redeliver")+"&vis=100", "", 200, "2 1 y\n")
				time.Sleep(150 * time.Millisecond)
				n.expect("GET", app("ack", "redeliver")+"&id=2&attempt=1", "", 200, "stale")
				n.expect("GET", app("stats", "redeliver"), "", 200, "ready 1 delayed 0 inflight 0 dead 0")
			})

			t.Run("retries, then the dead letters", func(t *testing.T) {
				n.expect("POST", app("send", "dead"), "doomed", 200, "1")
				n.expect("GET", app("lease", "dead"), "", 200, "1 1 doomed\n")
				n.expect("GET", app("retry", "dead")+"&id=1&attempt=1", "", 200, "current") // backoff: 250 ms
				n.until("GET", app("lease", "dead"), "", "1 2 doomed\n")
				n.expect("GET", app("retry", "dead")+"&id=1&attempt=2&after=1000", "", 200, "current")
				n.expect("GET", app("stats", "dead"), "", 200, "ready 0 delayed 1 inflight 0 dead 0")
				n.until("GET", app("lease", "dead"), "", "1 3 doomed\n")
				// The last attempt's retry dead-letters at once.
				n.expect("GET", app("retry", "dead")+"&id=1&attempt=3", "", 200, "current")
				n.expect("GET", app("stats", "dead"), "", 200, "ready 0 delayed 0 inflight 0 dead 1")
				// A message whose last lease runs out is dead-lettered with that reason.
				n.expect("POST", app("send", "dead"), "lost", 200, "2")
				for attempt := 1; attempt <= 3; attempt++ {
					n.until("GET", app("lease", "dead")+"&vis=100", "", "2 "+strconv.Itoa(attempt)+" lost\n")
				}
				n.until("GET", app("stats", "dead"), "", "ready 0 delayed 0 inflight 0 dead 2")
				n.expect("GET", app("dead", "dead"), "", 200, "1 3 attempt 3: retried by the consumer | doomed\n"+
					"2 3 attempt 3: the lease ran out (100 ms) without an ack or a retry | lost\n")
				n.expect("GET", app("dead", "dead")+"&limit=1", "", 200, "1 3 attempt 3: retried by the consumer | doomed\n")
				n.expect("GET", app("lease", "dead"), "", 200, "")
			})

			t.Run("settle a batch", func(t *testing.T) {
				n.expect("POST", app("batch", "settle"), "s1\ns2\ns3", 200, "1 2 3")
				n.expect("GET", app("lease", "settle")+"&max=3&vis=10000", "", 200, "1 1 s1\n2 1 s2\n3 1 s3\n")
				n.expect("POST", app("settle", "settle"), "1 1 ack\n2 1 after:60000\n3 9 ack", 200, "1 1 0")
				n.expect("GET", app("stats", "settle"), "", 200, "ready 0 delayed 1 inflight 1 dead 0")
			})

			t.Run("push: ack, retry, a crash, a failing batch", func(t *testing.T) {
				push := func(route string) string { return app(route, "push.app") }
				deliveries := "/actor/app/consumer/deliveries"
				n.expect("POST", push("send"), "hello", 200, "1")
				n.until("GET", deliveries, "", "queue/push.app 1 1 hello\n")
				n.until("GET", push("stats"), "", "ready 0 delayed 0 inflight 0 dead 0")

				// A consumer that crashes mid-message gets it again, same id,
				// higher attempt; the whole batch is retried.
				n.expect("POST", push("batch"), "crash\nafter", 200, "2 3")
				want := "queue/push.app 1 1 hello\nqueue/push.app 2 1 crash\n" +
					"queue/push.app 2 2 crash\nqueue/push.app 3 2 after\n"
				n.until("GET", deliveries, "", want)
				n.until("GET", push("stats"), "", "ready 0 delayed 0 inflight 0 dead 0")

				// Retry outcomes use the backoff; the last attempt dead-letters.
				n.expect("POST", push("send"), "retry", 200, "4")
				want += "queue/push.app 4 1 retry\nqueue/push.app 4 2 retry\nqueue/push.app 4 3 retry\n"
				n.until("GET", deliveries, "", want)
				n.until("GET", push("stats"), "", "ready 0 delayed 0 inflight 0 dead 1")

				// A consumer that always fails: three attempts, then dead with the reason.
				n.expect("POST", push("send"), "fail", 200, "5")
				want += "queue/push.app 5 1 fail\nqueue/push.app 5 2 fail\nqueue/push.app 5 3 fail\n"
				n.until("GET", deliveries, "", want)
				n.until("GET", push("stats"), "", "ready 0 delayed 0 inflight 0 dead 2")
				dead := n.body("GET", push("dead"))
				if !strings.HasPrefix(dead, "4 3 attempt 3: retried by the consumer | retry\n"+
					"5 3 attempt 3: delivery to app/consumer failed: ") || !strings.HasSuffix(dead, " | fail\n") {
					t.Fatalf("dead letters: %q", dead)
				}
			})

			t.Run("only actors are answered", func(t *testing.T) {
				n.expect("POST", "/actor/app/consumer/wasmkeep-queue/v1/deliver", "", 403,
					"queue: deliveries come only from queues (x-wasmkeep-caller is missing)\n")
				// A client's call errors read the same in every SDK.
				n.expect("GET", "/actor/app/a/stats?q=nosuch/x", "", 200, "error call 0: call invalid-address: no class nosuch is served")
				code, _ := n.do("POST", "/actor/queue/basic/wasmkeep-queue/v1/stats", "")
				if code != 403 {
					t.Fatalf("an outside request to an internal queue class: %d", code)
				}
				// Config.Allow narrows the callers.
				n.expect("GET", "/actor/app/allowed/stats?q=queue/private.a", "", 200, "ready 0 delayed 0 inflight 0 dead 0")
				n.expect("GET", "/actor/app/a/stats?q=queue/private.a", "", 200, "error refused 403: queue: this queue does not answer default/app/a")
			})
		})
	}
}

// A queue class without --access internal still answers only actors.
func TestQueueRefusesOutsideRequests(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{
		"queue": buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclass", ""),
	}})
	n.expect("POST", "/actor/queue/q/wasmkeep-queue/v1/stats", "", 403,
		"queue: only other actors may call a queue (x-wasmkeep-caller is missing)\n")
}

// examples/jobs/queue: queue/jobs pushes to worker/main, other queues are
// pull-only.
func TestQueueJobsExample(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{
		"queue":  buildGuest(t, "examples/jobs/queue", ""),
		"worker": buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient", ""),
	}})
	n.expect("POST", "/actor/worker/x/send?q=queue/jobs", "job 1", 200, "1")
	n.expect("POST", "/actor/worker/x/send?q=queue/inbox", "mail", 200, "1")
	n.until("GET", "/actor/worker/main/deliveries", "", "queue/jobs 1 1 job 1\n")
	n.until("GET", "/actor/worker/x/stats?q=queue/jobs", "", "ready 0 delayed 0 inflight 0 dead 0")
	n.expect("GET", "/actor/worker/x/stats?q=queue/inbox", "", 200, "ready 1 delayed 0 inflight 0 dead 0")

	// One alarm delivered the message; a quiet queue has no alarm, and a
	// pull-only queue never has one.
	alarms := `wasmkeep_events_total{class="queue",kind="alarm",outcome="ok"}`
	time.Sleep(300 * time.Millisecond)
	if got := n.metric(alarms); got != 1 {
		t.Fatalf("alarm events after one delivery: %v, want 1", got)
	}
	// 25 messages in batches of 10: three alarms, one after the other at
	// once, then none.
	n.expect("POST", "/actor/worker/x/batch?q=queue/jobs", strings.TrimSuffix(strings.Repeat("m\n", 25), "\n"), 200, ids(2, 26))
	n.until("GET", "/actor/worker/x/stats?q=queue/jobs", "", "ready 0 delayed 0 inflight 0 dead 0")
	time.Sleep(300 * time.Millisecond)
	if got := n.metric(alarms); got != 4 {
		t.Fatalf("alarm events after 25 more messages: %v, want 4", got)
	}
	if got := strings.Count(n.body("GET", "/actor/worker/main/deliveries"), "\n"); got != 26 {
		t.Fatalf("%d deliveries, want 26", got)
	}
}

// ids lists the integers from a to b, space-separated.
func ids(a, b int) string {
	var s []string
	for i := a; i <= b; i++ {
		s = append(s, strconv.Itoa(i))
	}
	return strings.Join(s, " ")
}

// Messages, leases and a push queue's pending delivery survive a restart of
// the node.
func TestQueueSurvivesRestart(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{
		"queue": buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclass", ""),
		"app":   buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient", ""),
	}}
	n := startNode(t, opts)
	n.expect("POST", "/actor/app/a/batch?q=queue/kept", "a\nb\nc", 200, "1 2 3")
	n.expect("GET", "/actor/app/a/lease?q=queue/kept&max=1&vis=60000", "", 200, "1 1 a\n")
	n.expect("POST", "/actor/app/a/send?q=queue/push.app&delay=500", "later", 200, "1")
	n.stop()

	n = startNode(t, opts)
	n.expect("GET", "/actor/app/a/stats?q=queue/kept", "", 200, "ready 2 delayed 0 inflight 1 dead 0")
	n.expect("GET", "/actor/app/a/ack?q=queue/kept&id=1&attempt=1", "", 200, "current")
	n.until("GET", "/actor/app/consumer/deliveries", "", "queue/push.app 1 1 later\n")
}

// A lease and a dead-letter sweep stay within what one query and one event
// may carry: a lease takes messages while their bodies stay under 8 MiB
// (the first always), and a sweep moves at most 100 messages, the rest at
// the next one, which leases skip meanwhile and stats count as dead.
func TestQueueBoundsLeasesAndSweeps(t *testing.T) {
	n := startQueueNode(t, buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient", ""))
	big := strings.Repeat("b", 5<<20)
	for i := range 3 {
		n.expect("POST", "/actor/app/a/send?q=queue/big", big, 200, strconv.Itoa(i+1))
	}
	leased := n.body("GET", "/actor/app/a/lease?q=queue/big&max=10&vis=60000")
	if got := strings.Count(leased, "\n"); got != 2 {
		t.Errorf("a lease of 10 over three 5 MiB messages took %d, want 2 (8 MiB)", got)
	}

	// 250 messages through their three attempts, each lease running out at
	// once. Every stats, dead and lease call sweeps first: one page each.
	n.expect("POST", "/actor/app/a/batch?q=queue/sweep", strings.TrimSuffix(strings.Repeat("m\n", 250), "\n"), 200, ids(1, 250))
	for range 3 {
		if got := strings.Count(n.body("GET", "/actor/app/a/lease?q=queue/sweep&max=1000&vis=1"), "\n"); got != 250 {
			t.Fatalf("a lease took %d of 250", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.expect("GET", "/actor/app/a/stats?q=queue/sweep", "", 200, "ready 0 delayed 0 inflight 0 dead 250")
	if got := strings.Count(n.body("GET", "/actor/app/a/dead?q=queue/sweep&limit=1000"), "\n"); got != 200 {
		t.Errorf("two sweeps moved %d messages, want 200", got)
	}
	n.expect("GET", "/actor/app/a/lease?q=queue/sweep&max=1000&vis=1", "", 200, "")
	if got := strings.Count(n.body("GET", "/actor/app/a/dead?q=queue/sweep&limit=1000"), "\n"); got != 250 {
		t.Errorf("three sweeps moved %d messages, want 250", got)
	}
}
