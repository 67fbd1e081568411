package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// The alarm sweep (issue 26, item 3; book ADR 0009, point 4): a dead
// node's alarms fire on the live nodes with no request. Three nodes on one
// bucket, every one sweeping each second (a tenth of the default, as the
// book's alarm_recovery bench runs) on steadyLease's timings (ttl 4 s,
// grace 0.5 s: an entry is the live nodes' once 4.5 s overdue). Node a
// takes, through requests sent to it, sweepActors probe actors, each with
// an alarm set durably (listed in the bucket's index before it is
// shipped), a push queue holding messages, and a workflow asleep; b holds
// the actors the queue pushes to and the workflow's steps count in. Then a
// is killed (SIGKILL) before any of those alarms is due, and no request
// reaches the probes, the queue or the workflow until the index holds no
// probe entry (every alarm ran on b or c, and its entry was removed) and
// the queue's messages and the workflow's last step reached b. Only then
// is each probe's record of its alarm's runs (alarm_attempts, its own
// database) read: each ran exactly once (a second run is at-least-once's
// and counted; more than 1% fails), before that read and after the kill.
// Lateness (run minus due) is logged as p50/p99, against the book's
// "about 25 s after due" at the default timings: a margin (ttl + grace)
// plus up to one sweep, with the fence, the restore and the queue of
// deliveries on top.
//
// The alarms are spread over sweepSpread rather than the minute:
// lateness does not depend on where in the spread an alarm falls (every
// entry waits the same margin), and a minute would double the test's wall
// time on a 2-core machine for nothing the spread shows. The spread still
// makes the sweeps meet entries a few at a time and in one burst (the
// first due right after the kill, when the dead node is not fenced yet).
//
// The control, side by side, runs the same kill with the sweep off
// (--alarm-sweep-secs 0) and sweepControlActors probes (enough to show
// none runs; 1,000 would double the test's load): none of their alarms
// runs and every entry stays for controlWait past the last due time, more
// than three times the margin plus a sweep the full run's lateness is made
// of; so what fires the alarms above is the sweep.
const (
	sweepActors        = 1000
	sweepControlActors = 50
	sweepSpread        = 10 * time.Second
	controlWait        = 15 * time.Second
)

func TestAlarmSweepFiresADeadNodesAlarms(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	t.Run("sweep", func(t *testing.T) {
		t.Parallel()
		sweepRun(t, 1, sweepActors, true)
	})
	t.Run("control: the sweep off", func(t *testing.T) {
		t.Parallel()
		c := sweepRun(t, 0, sweepControlActors, false)
		if c.fired > 0 || c.entries != sweepControlActors {
			t.Fatalf("with the sweep off, %d of %d alarms ran and %d entries are left %v past the last due time: the test cannot tell the sweep did it",
				c.fired, sweepControlActors, c.entries, c.waited.Round(time.Millisecond))
		}
		t.Logf("with the sweep off, none of %d alarms ran and every entry stayed, %v past the last due time", sweepControlActors, c.waited.Round(time.Millisecond))
	})
}

// sweepResult is what a sweepRun saw.
type sweepResult struct {
	fired   int           // probes whose alarm ran
	entries int           // probe entries left in the index at the end of the wait
	waited  time.Duration // past the last due time, until the index held no probe entry or the wait ended
}

// sweepRun runs the kill with the sweep every sweepSecs (0: off) and
// actors probes; full adds the queue and the workflow and checks every
// alarm ran once. Without full it waits controlWait and reports.
func sweepRun(t *testing.T, sweepSecs, actors int, full bool) sweepResult {
	bucketDir := memDir(t)
	bucketURL := "file://" + bucketDir
	wfEnv := filepath.Join(t.TempDir(), "wf.env")
	if err := os.WriteFile(wfEnv, []byte("BACKOFF_MS=100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(slices.Clone(steadyLease), "WASMKEEP_NODE__ALARM_SWEEP_SECS="+strconv.Itoa(sweepSecs),
		"WASMKEEP_NODE__MAX_INSTANCES="+strconv.Itoa(actors+100)) // a holds every probe: none hibernates, releasing it
	c := &killCluster{urls: make([]string, 3)}
	for _, id := range []string{"a", "b", "c"} {
		n := newBucketNode(t, bucketURL, env)
		n.args = []string{"--actor", "probe=" + probe(t), "--bucket", bucketURL}
		if full {
			n.args = append(n.args, "--actor", "queue="+buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclass", ""),
				"--actor", "app="+buildGuest(t, "cmd/wasmkeep/testdata/guests/queueclient", ""), "--access", "queue=internal",
				"--actor", "wfdriver="+wfDrivers()[0].build(t), "--actor", "wf="+wfScript(t), "--access", "wf=internal", "--env", "wf="+wfEnv)
		}
		n.args = append(n.args, "--node-id", id) // last: bucketNode.id reads it there
		c.nodes = append(c.nodes, n)
	}
	setup := time.Now()
	c.startAll(t)
	t.Logf("three nodes ready in %v", time.Since(setup).Round(time.Millisecond))
	a, b := c.nodes[0], c.nodes[1]
	expect := func(n *bucketNode, method, path, body, want, node string) {
		t.Helper()
		if r, err := sendBody(durabilityClient, method, n.url+path, body); err != nil || r.code != 200 || !strings.HasPrefix(r.body, want) || r.node != node {
			t.Fatalf("%s %s through %s: %+v %v, want 200 %q from %s\n%s", method, path, n.id(), r, err, want, node, c.logs())
		}
	}

	// Every due time is after the kill: a takes the probes within
	// createBudget (1,000 took 42 s with three other test runs on the
	// 2-core machine, about 10 s alone), then is killed.
	createBudget := 3*time.Second + time.Duration(actors)*45*time.Millisecond
	start := time.Now()
	first := start.Add(createBudget)
	last := first.Add(sweepSpread)
	const messages = 3
	if full {
		// b holds the push queue's consumer and the workflow's counter.
		expect(b, "GET", "/actor/app/consumer/deliveries", "", "", "b")
		expect(b, "GET", "/actor/wfdriver/counter/count?key=none", "", "", "b")
		// a holds the queue (its messages visible from the middle of the
		// spread) and the workflow (asleep until then).
		mid := first.Add(sweepSpread / 2)
		for i := range messages {
			expect(a, "POST", "/actor/app/a/send?q=queue/push.app&delay="+strconv.FormatInt(time.Until(mid).Milliseconds()+int64(i)*100, 10), "m"+strconv.Itoa(i), strconv.Itoa(i+1), "a")
		}
		expect(a, "POST", wfPath("start", "wf", "sleeper"), "step a; sleep s "+strconv.FormatInt(time.Until(mid).Milliseconds(), 10)+"; step b", "running", "a")
		awaitBody(t, a.url, wfPath("status", "wf", "sleeper"), "waiting wake=yes ")
	}
	names := make([]string, actors)
	due := map[string]int64{}
	for i := range names {
		names[i] = fmt.Sprintf("s%04d", i)
		due[names[i]] = first.Add(sweepSpread * time.Duration(i) / time.Duration(actors)).UnixMilli()
	}
	var mu sync.Mutex
	var failures []string
	forEach(names, 16, func(_ int, name string) {
		r, err := sendBody(durabilityClient, "GET", a.url+"/actor/probe/"+name+"/alarm-set?durable=1&at="+strconv.FormatInt(due[name], 10), "")
		if err != nil || r != (reply{200, "ok set", "a"}) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s: %+v %v", name, r, err))
			mu.Unlock()
		}
	})
	if len(failures) > 0 {
		t.Fatalf("alarm-set through a: %s\n%s", few(failures), c.logs())
	}
	created := time.Since(start)
	if time.Now().After(first) {
		t.Fatalf("a took the %d probes in %v, past the first due time (%v): raise createBudget", actors, created.Round(time.Millisecond), createBudget)
	}
	a.kill()
	killed := time.Now()
	t.Logf("a took %d probes (alarms due %v to %v after the kill) in %v, then was killed", actors,
		first.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond), created.Round(time.Millisecond))

	// Wait, with no request to the probes, the queue or the workflow, until
	// the index holds no probe entry (the full run) or controlWait (the
	// control). The full run's bound is for a loaded machine, not a
	// measure (the lateness is logged below): on this 2-core VM beside the
	// whole suite, 365 of 1,000 entries were left 25 s after the last due
	// time, each delivery a first instance of the probe.
	entries := func() int { return probeEntries(t, bucketDir) }
	budget := last.Add(2 * time.Minute)
	if !full {
		budget = last.Add(controlWait)
	}
	for time.Now().Before(budget) && (entries() > 0 || !full) {
		time.Sleep(200 * time.Millisecond)
	}
	left := entries()
	took := time.Since(last)
	if !full {
		fired := 0
		for _, n := range names {
			if len(alarmRuns(t, b, n)) > 0 {
				fired++
			}
		}
		return sweepResult{fired: fired, entries: left, waited: took}
	}
	if left > 0 {
		t.Errorf("%d probe entries still in the index %v after the last due time", left, took.Round(time.Millisecond))
	} else {
		t.Logf("the index held no probe entry %v after the last due time", took.Round(time.Millisecond))
	}
	// Each probe's runs, read now: before this read, nothing reached them.
	read := time.Now().UnixMilli()
	var late []time.Duration
	var missing, twice, wrong []string
	forEach(names, 16, func(_ int, name string) {
		runs, holder := alarmRunsOn(t, b, name)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case len(runs) == 0:
			missing = append(missing, name)
			return
		case len(runs) > 1:
			twice = append(twice, fmt.Sprintf("%s: %d runs", name, len(runs)))
		}
		if runs[0] < killed.UnixMilli() || runs[0] > read || holder != "b" && holder != "c" {
			wrong = append(wrong, fmt.Sprintf("%s ran at %d, held by %q: the kill was at %d, the read at %d", name, runs[0], holder, killed.UnixMilli(), read))
		}
		late = append(late, time.Duration(runs[0]-due[name])*time.Millisecond)
	})
	if len(missing) > 0 || len(wrong) > 0 {
		t.Errorf("of %d alarms, %d never ran: %s; %d ran not on b or c with no request: %s", actors, len(missing), few(missing), len(wrong), few(wrong))
	}
	if len(twice) > actors/100 {
		t.Errorf("%d alarms ran more than once (at-least-once, but more than 1%%): %s", len(twice), few(twice))
	}
	slices.Sort(late)
	if len(late) > 0 {
		t.Logf("%d alarms ran once on b or c, %d twice; lateness p50 %v, p99 %v, max %v (the book: about 25 s at the default timings, "+
			"ttl + grace + up to a sweep; here ttl + grace is 4.5 s and a sweep 1 s)", len(late)-len(twice), len(twice),
			late[len(late)/2].Round(time.Millisecond), late[len(late)*99/100].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
	}
	// The queue's messages and the workflow's last step, read where they
	// arrive: on b, not from the queue or the workflow.
	want := ""
	for i := range messages {
		want += fmt.Sprintf("queue/push.app %d 1 m%d\n", i+1, i)
	}
	lines := func(s string) []string { l := strings.Split(strings.TrimSpace(s), "\n"); slices.Sort(l); return l }
	arrived := func(what, path, want string) {
		t.Helper()
		var last reply
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			// A push batch's messages may arrive in any order.
			r, err := sendBody(durabilityClient, "GET", b.url+path, "")
			if err == nil && slices.Equal(lines(r.body), lines(want)) {
				return
			}
			last = r
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s through b answers %+v, want %q; the index holds %q\n%s", what, path, last, want, indexKeys(t, bucketDir),
					c.lines("queue", "wf", "alarm", "sweep", "push", "consumer", "counter"))
			}
		}
	}
	arrived("the queue's messages, pushed to b's consumer", "/actor/app/consumer/deliveries", want)
	arrived("the workflow's last step, counted on b", "/actor/wfdriver/counter/count?key=sleeper-b", "1")
	t.Logf("the queue's %d messages and the workflow's last step arrived with no request to either", messages)
	if t.Failed() {
		t.Log(c.lines("sweep", "alarm"))
	}
	return sweepResult{fired: len(late), entries: left, waited: took}
}

// indexKeys are the keys in the bucket's alarm index (bucket-fs keeps a
// key as a file under its path).
func indexKeys(t *testing.T, bucketDir string) []string {
	t.Helper()
	var keys []string
	root := filepath.Join(bucketDir, "state", "default", "default")
	err := filepath.WalkDir(filepath.Join(root, "alarms"), func(path string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist): // removed while the walk went on (the root: not made yet)
			return nil
		case err == nil && !d.IsDir():
			rel, _ := filepath.Rel(root, path)
			keys = append(keys, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// probeEntries counts the probe class's entries in the alarm index.
func probeEntries(t *testing.T, bucketDir string) int {
	t.Helper()
	n := 0
	for _, k := range indexKeys(t, bucketDir) {
		if strings.Contains(k, "/probe.t/") {
			n++
		}
	}
	return n
}

// In one process, on an in-memory bucket (clusterNodeOn's timings: an
// entry is the sweep's once 1.5 s overdue): node a sets y's alarm, due in
// a second, and stops cleanly (its actors released, the alarm left in the
// bucket's index and a's own data). Node b, which never ran y, sweeps
// every 200 ms: y's alarm runs there with no request, its entry removed
// after; the run is read afterwards. With b's sweep off, the entry stays
// and the alarm does not run in the same time (4 s past its due time).
func TestTheSweepDeliversAnAlarmNobodyHolds(t *testing.T) {
	engineNeutral(t)
	for _, sweep := range []time.Duration{200 * time.Millisecond, node.NoAlarmSweep} {
		t.Run(map[bool]string{true: "sweep", false: "control: the sweep off"}[sweep > 0], func(t *testing.T) {
			mem := buckettest.NewMemory(buckettest.Flaws{})
			state := bucket.Under(mem, app.Default.StateRoot())
			classes := map[string]string{"probe": probe(t)}
			a, _ := clusterNodeOn(t, mem, "a", classes)
			due := time.Now().Add(time.Second).UnixMilli()
			a.expect("GET", "/actor/probe/y/alarm-set?at="+strconv.FormatInt(due, 10), "", 200, "set")
			a.stop()
			b := sweepingNodeOn(t, mem, "b", classes, sweep)
			entries := func() int {
				listed, err := bucket.ListAll(t.Context(), state, alarmindex.Prefix)
				if err != nil {
					t.Fatal(err)
				}
				return len(listed)
			}
			for deadline := time.UnixMilli(due).Add(4 * time.Second); entries() > 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			left := entries()
			rec := httptest.NewRecorder()
			b.node.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			swept := metricValue(rec.Body.String(), `wasmkeep_alarm_sweep_deliveries_total{share="own"}`)
			passes := metricValue(rec.Body.String(), `wasmkeep_alarm_sweeps_total{outcome="ok"}`)
			read := time.Now().UnixMilli()
			code, body := b.do("POST", "/actor/probe/y/query", "SELECT at FROM alarm_attempts")
			ran := code == 200 && strings.HasPrefix(body, "ok ") && body != "ok "
			if sweep < 0 {
				if ran || left != 1 || passes != 0 {
					t.Fatalf("with the sweep off: the alarm ran %v (%d %q), %d entries left, %v passes, want it not run, its entry left, no pass", ran, code, body, left, passes)
				}
				return
			}
			if left != 0 || !ran || swept < 1 || passes < 1 {
				t.Fatalf("with the sweep: %d entries left, y's runs %d %q, %v passes handed %v alarms to the timer; want none left, one run, the alarm handed over\n%s",
					left, code, body, passes, swept, b.log)
			}
			at, err := strconv.ParseInt(strings.TrimPrefix(body, "ok "), 10, 64)
			if err != nil || at > read || at < due {
				t.Fatalf("y's alarm ran at %q: want one run after its time %d, before the read at %d", body, due, read)
			}
			t.Logf("y's alarm ran on b %v after its time, with no request", time.Duration(at-due)*time.Millisecond)
		})
	}
}

// sweepingNodeOn is clusterNodeOn's node with its alarm sweep every sweep
// (node.NoAlarmSweep: none) and its view of its peers kept (the sweep
// waits for two listings).
func sweepingNodeOn(t *testing.T, b bucket.Bucket, id string, classes map[string]string, sweep time.Duration) *testNode {
	t.Helper()
	tn, m := clusterNode(t, b, id, node.Options{Classes: classes, Placement: placement.Local{}, AlarmSweep: sweep})
	go m.WatchPeers(t.Context())
	return tn
}
