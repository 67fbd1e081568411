package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// Workflows (sdk/go/workflow, the book's ADR 0019) against a real server:
// the runner is a Go class (examples/jobs/orders, or the scripted class of
// testdata/guests/wfscript), driven through its client by a driver actor
// written in each SDK (testdata/guests/wfdriver, testdata/guests/cwfdriver)
// that exposes the same routes. The class's waits and backoffs are set to
// 100s of ms by its configuration.

func wfDrivers() []sdkGuest {
	return []sdkGuest{
		{"go", func(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/wfdriver", "") }},
		{"c", func(t testing.TB) string { return buildCGuest(t, "cmd/wasmkeep/testdata/guests/cwfdriver") }},
	}
}

func wfScript(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/wfscript", "") }

// wfNode serves the driver (wfdriver), the scripted class (wf) and the
// orders class, the two workflow classes internal, with env as both
// classes' configuration.
func wfNode(t *testing.T, driver string, dataDir string, env map[string]string) *testNode {
	t.Helper()
	internal := mustAccess(t, "internal")
	return startNode(t, node.Options{
		DataDir: dataDir,
		Classes: map[string]string{"wfdriver": driver, "wf": wfScript(t), "orders": buildGuest(t, "examples/jobs/orders", "")},
		Access:  map[string]access.Access{"wf": internal, "orders": internal},
		Env:     map[string]map[string]string{"wf": env, "orders": env},
	})
}

// wfPath is the driver's route for an instance of class.
func wfPath(route, class, id string, extra ...string) string {
	p := "/actor/wfdriver/d/" + route + "?class=" + class + "&id=" + url.QueryEscape(id)
	for _, e := range extra {
		p += "&" + e
	}
	return p
}

// awaitBody polls a GET until its body starts with want, and returns it.
func awaitBody(t *testing.T, base, path, want string) string {
	t.Helper()
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("last answer: %q", body)
		}
	}()
	waitFor(t, 20*time.Second, path+" to answer "+want, func() bool {
		resp, err := http.Get(base + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false
		}
		body = string(b)
		return strings.HasPrefix(body, want)
	})
	return body
}

func wfCount(t *testing.T, n *testNode, key string) string {
	t.Helper()
	_, body := n.do("GET", "/actor/wfdriver/counter/count?key="+key, "")
	return strings.TrimSpace(body)
}

// The order workflow: start (idempotent while kept), waiting on its sleep
// then on "approved", the event, completion with the output; an event to a
// finished instance, a cancel, unknown ids and outside requests.
func TestWorkflowClientContract(t *testing.T) {
	for _, g := range wfDrivers() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			n := wfNode(t, g.build(t), "", map[string]string{"COOL_OFF_MS": "300", "APPROVAL_TIMEOUT_MS": "60000"})
			n.expect("POST", wfPath("start", "orders", "o-42"), "book", 200, "running wake=no waiting= positions=0 output=- error=\n")
			awaitBody(t, n.url, wfPath("status", "orders", "o-42"), "waiting wake=yes waiting=approved positions=3 ")
			// A second start changes nothing and answers the status.
			n.expect("POST", wfPath("start", "orders", "o-42"), "other", 200, "waiting wake=yes waiting=approved positions=3 output=- error=\n")
			n.expect("GET", wfPath("result", "orders", "o-42"), "", 200, "pending\n")
			n.expect("POST", wfPath("event", "orders", "o-42", "name=approved"), "", 200, "ok\n")
			out := awaitBody(t, n.url, wfPath("result", "orders", "o-42"), "done ")
			if !strings.HasPrefix(out, "done shipped: reservation ") || !strings.Contains(out, "-0 for book; charged ") || !strings.HasSuffix(out, "-3\n") {
				t.Errorf("result: %q", out)
			}
			status := awaitBody(t, n.url, wfPath("status", "orders", "o-42"), "completed wake=no waiting= positions=4 output=shipped")
			code, body := n.do("POST", wfPath("event", "orders", "o-42", "name=approved"), "")
			if code != 502 || !strings.HasPrefix(body, "finished: ") {
				t.Errorf("an event to a finished instance: %d %q", code, body)
			}
			n.expect("POST", wfPath("cancel", "orders", "o-42"), "", 200, status) // a finished instance stays as it is

			n.expect("POST", wfPath("start", "orders", "o 43%"), "pen", 200, "running wake=no waiting= positions=0 output=- error=\n")
			awaitBody(t, n.url, wfPath("status", "orders", "o 43%"), "waiting wake=yes waiting=approved")
			n.expect("POST", wfPath("cancel", "orders", "o 43%"), "", 200, "cancelled wake=no waiting= positions=3 output=- error=\n")
			n.expect("GET", wfPath("result", "orders", "o 43%"), "", 502, "cancelled: cancelled\n")
			code, body = n.do("POST", wfPath("event", "orders", "o 43%", "name=approved"), "")
			if code != 502 || !strings.HasPrefix(body, "finished: ") {
				t.Errorf("an event to a cancelled instance: %d %q", code, body)
			}

			// Unknown ids answer unknown and leave nothing on disk.
			for _, route := range []string{"status", "cancel", "event"} {
				n.expect("POST", wfPath(route, "orders", "ghost", "name=approved"), "", 502, "unknown: unknown workflow instance\n")
			}
			if _, err := os.Stat(filepath.Join(n.dataDir, "state", "default", "default", "actors", "default", "orders", "ghost.db")); !os.IsNotExist(err) {
				t.Errorf("the unknown instance left its database: %v", err)
			}
		})
	}
}

// Outside requests are refused (403) even on an open class, and leave
// nothing behind.
func TestWorkflowRefusesOutsideRequests(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"wf": wfScript(t)}})
	n.expect("POST", "/actor/wf/x/wasmkeep-workflow/v1/start", "\x00\x00\x00\x00", 403, "workflow instances answer only other actors (actors.call)\n")
	if _, err := os.Stat(filepath.Join(n.dataDir, "state", "default", "default", "actors", "default", "wf", "x.db")); !os.IsNotExist(err) {
		t.Errorf("the refused request left a database: %v", err)
	}
}

// A step whose result was recorded never runs again, however many events
// replay it; two waits for one name take one event each; a wait times out.
func TestWorkflowReplayKeepsRecordedSteps(t *testing.T) {
	for _, g := range wfDrivers() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			n := wfNode(t, g.build(t), "", nil)
			n.expect("POST", wfPath("start", "wf", "r"), "step a; step b; sleep s 200; step c; wait go 60000; wait go 60000; wait late 5000", 200,
				"running wake=no waiting= positions=0 output=- error=\n")
			awaitBody(t, n.url, wfPath("status", "wf", "r"), "waiting wake=yes waiting=go positions=5 ")
			n.expect("POST", wfPath("event", "wf", "r", "name=go"), "one", 200, "ok\n")
			n.expect("POST", wfPath("event", "wf", "r", "name=go"), "two", 200, "ok\n")
			n.expect("POST", wfPath("event", "wf", "r", "name=late"), "late", 200, "ok\n")
			awaitBody(t, n.url, wfPath("result", "wf", "r"), "done a,b,c,one,two,late\n")
			for key, want := range map[string]string{"r-a": "1", "r-b": "1", "r-c": "1"} {
				if got := wfCount(t, n, key); got != want {
					t.Errorf("step %s ran %s times, want %s", key, got, want)
				}
			}
			until := time.Now().Add(400 * time.Millisecond)
			n.expect("POST", wfPath("start", "wf", "u"), "until u "+strconv.FormatInt(until.UnixMilli(), 10)+"; step z", 200,
				"running wake=no waiting= positions=0 output=- error=\n")
			awaitBody(t, n.url, wfPath("result", "wf", "u"), "done z\n")
			if time.Now().Before(until) {
				t.Errorf("the sleep until %v ended early", until)
			}
			n.expect("POST", wfPath("start", "wf", "t"), "wait go 300", 200, "running wake=no waiting= positions=0 output=- error=\n")
			awaitBody(t, n.url, wfPath("result", "wf", "t"), "done go timed out\n")
			code, body := n.do("POST", wfPath("event", "wf", "t", "name=go"), "too late")
			if code != 502 || !strings.HasPrefix(body, "finished: ") {
				t.Errorf("an event after the timeout: %d %q", code, body)
			}
		})
	}
}

// A deploy that reorders recorded steps fails the instance rather than
// mixing two histories.
func TestWorkflowRefusesChangedStepOrder(t *testing.T) {
	data := t.TempDir()
	driver := wfDrivers()[0].build(t)
	n := wfNode(t, driver, data, nil)
	n.expect("POST", wfPath("start", "wf", "o"), "step a; step b; wait go 60000", 200, "running wake=no waiting= positions=0 output=- error=\n")
	awaitBody(t, n.url, wfPath("status", "wf", "o"), "waiting wake=yes waiting=go positions=3 ")
	n.stop()
	n = wfNode(t, driver, data, map[string]string{"SWAP": "1"})
	n.expect("POST", wfPath("event", "wf", "o", "name=go"), "", 200, "ok\n")
	awaitBody(t, n.url, wfPath("result", "wf", "o"),
		`failed: the code changed the order of its steps: position 0 is the step "a" in the record, the step "b" in the code`)
	if got := wfCount(t, n, "o-b"); got != "1" {
		t.Errorf("step b ran %s times, want 1", got)
	}
}

// An error is retried with backoff, then fails the workflow, or, from a
// TryStep, is the workflow's to handle; runs that keep ending without the
// workflow returning fail it after twice its attempts.
func TestWorkflowRetriesThenFails(t *testing.T) {
	n := wfNode(t, wfDrivers()[0].build(t), "", map[string]string{"ATTEMPTS": "3", "BACKOFF_MS": "100"})
	began := time.Now()
	n.expect("POST", wfPath("start", "wf", "flaky"), "flaky f 2", 200, "running wake=no waiting= positions=0 output=- error=\n")
	n.expect("POST", wfPath("start", "wf", "broken"), "step a; flaky g 5", 200, "running wake=no waiting= positions=0 output=- error=\n")
	n.expect("POST", wfPath("start", "wf", "caught"), "try h 5; step z", 200, "running wake=no waiting= positions=0 output=- error=\n")
	n.expect("POST", wfPath("start", "wf", "trap"), "step a; trap", 200, "running wake=no waiting= positions=0 output=- error=\n")
	n.expect("POST", wfPath("start", "wf", "panicky"), "panicky p 1; panicky q 5", 200, "running wake=no waiting= positions=0 output=- error=\n")
	awaitBody(t, n.url, wfPath("result", "wf", "flaky"), "done f\n")
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Errorf("two failed attempts then a success took %v: less than their backoff (100 ms, then 200 ms)", d)
	}
	awaitBody(t, n.url, wfPath("result", "wf", "broken"), `failed: step "g" failed after 3 attempts: attempt 3 fails`)
	awaitBody(t, n.url, wfPath("result", "wf", "caught"), `done caught step "h" failed after 3 attempts: attempt 3 fails,z`)
	awaitBody(t, n.url, wfPath("result", "wf", "trap"), "failed: the workflow's runs ended 6 times in a row without it returning or waiting")
	// A panic in a step ends its event: the attempt counts, retried from
	// the watchdog alarm.
	awaitBody(t, n.url, wfPath("result", "wf", "panicky"), `failed: step "q" failed after 3 attempts: the attempt ended before its result was recorded`)
	for key, want := range map[string]string{"flaky-f": "3", "broken-g": "3", "caught-h": "3", "trap-a": "1", "panicky-p": "2", "panicky-q": "3"} {
		if got := wfCount(t, n, key); got != want {
			t.Errorf("%s ran %s times, want %s", key, got, want)
		}
	}
	awaitBody(t, n.url, wfPath("status", "wf", "broken"), "failed wake=no waiting= positions=2 output=- error=step \"g\" failed")
}

// A finished instance deletes itself after its retention: its id is then
// unknown, and a start is a new run, with new idempotency keys.
func TestWorkflowRetention(t *testing.T) {
	n := wfNode(t, wfDrivers()[0].build(t), "", map[string]string{"RETENTION_MS": "300"})
	n.expect("POST", wfPath("start", "wf", "k"), "step a; key b", 200, "running wake=no waiting= positions=0 output=- error=\n")
	first := awaitBody(t, n.url, wfPath("result", "wf", "k"), "done a,")
	awaitBody(t, n.url, wfPath("status", "wf", "k"), "unknown: ")
	n.expect("POST", wfPath("start", "wf", "k"), "step a; key b", 200, "running wake=no waiting= positions=0 output=- error=\n")
	second := awaitBody(t, n.url, wfPath("result", "wf", "k"), "done a,")
	if got := wfCount(t, n, "k-a"); got != "2" {
		t.Errorf("step a ran %s times over two runs, want 2", got)
	}
	// The key is the run's id and the position.
	if !strings.HasSuffix(first, "-1\n") || !strings.HasSuffix(second, "-1\n") || first == second {
		t.Errorf("the keys of two runs: %q, %q", first, second)
	}
}

// An event spends the run budget on new steps, then continues in a new
// event, running at least one step in each. Each "event" step follows a
// step of 3 ms, past the 1 ms budget however fast the machine: without
// them, two steps can start within one millisecond.
func TestWorkflowRunBudget(t *testing.T) {
	script := "slow s1 3; event a; slow s2 3; event b; slow s3 3; event c"
	n := wfNode(t, wfDrivers()[0].build(t), "", map[string]string{"RUN_BUDGET_MS": "1"})
	n.expect("POST", wfPath("start", "wf", "short"), script, 200, "running wake=no waiting= positions=0 output=- error=\n")
	out := strings.Split(strings.TrimSpace(strings.TrimPrefix(awaitBody(t, n.url, wfPath("result", "wf", "short"), "done "), "done ")), ",")
	var events []string
	runs := map[string]bool{}
	for _, o := range out {
		if _, run, ok := strings.Cut(o, "@"); ok {
			events = append(events, o)
			runs[run] = true
		}
	}
	if len(events) != 3 || len(runs) != 3 {
		t.Errorf("with a 1 ms budget the steps ran in the events %v, want one each", events)
	}
	n = wfNode(t, wfDrivers()[0].build(t), "", nil)
	n.expect("POST", wfPath("start", "wf", "long"), script, 200, "running wake=no waiting= positions=0 output=- error=\n")
	awaitBody(t, n.url, wfPath("result", "wf", "long"), "done s1,a@1,s2,b@1,s3,c@1\n")
}

// A workflow survives a server killed (SIGKILL) in the middle of a sleep
// and in the middle of a step, then served again on the same data
// directory: the sleep ends at its recorded time, the cut step runs again
// (its result was not recorded) and no recorded step runs twice.
func TestWorkflowSurvivesAKill(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bin := wasmkeepBinary(t)
	data := t.TempDir()
	env := filepath.Join(t.TempDir(), "wf.env")
	if err := os.WriteFile(env, []byte("BACKOFF_MS=100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", data, "--actor", "wfdriver=" + wfDrivers()[0].build(t), "--actor", "wf=" + wfScript(t),
		"--access", "wf=internal", "--env", "wf=" + env}
	base, cmd, logs := serveBinary(t, bin, nil, args...)
	n := &testNode{t: t, url: base}
	count := func(key string) string { return wfCount(t, n, key) }
	for id, script := range map[string]string{"sleeping": "step a; sleep s 2000; step b", "busy": "step a; slow m 5000; step b"} {
		n.expect("POST", wfPath("start", "wf", id), script, 200, "running wake=no waiting= positions=0 output=- error=\n")
	}
	awaitBody(t, base, wfPath("status", "wf", "sleeping"), "waiting wake=yes waiting= positions=2 ")
	waitFor(t, 20*time.Second, "the slow step to begin", func() bool { return count("busy-m") == "1" })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	base, _, _ = serveBinary(t, bin, nil, args...)
	n.url = base
	awaitBody(t, base, wfPath("result", "wf", "sleeping"), "done a,b\n")
	awaitBody(t, base, wfPath("result", "wf", "busy"), "done a,m,b\n")
	for key, want := range map[string]string{"sleeping-a": "1", "sleeping-b": "1", "busy-a": "1", "busy-m": "2", "busy-b": "1"} {
		if got := count(key); got != want {
			t.Errorf("%s ran %s times, want %s\n%s", key, got, want, logs)
		}
	}
}

// Runs that record a step before the host cuts them make progress: their
// count of runs cut short starts again, so a workflow whose every event is
// cut after one step still completes, past twice its attempts.
func TestWorkflowCutRunsThatProgress(t *testing.T) {
	internal := mustAccess(t, "internal")
	n := startNode(t, node.Options{
		Classes:   map[string]string{"wfdriver": wfDrivers()[0].build(t), "wf": wfScript(t)},
		Access:    map[string]access.Access{"wf": internal},
		Env:       map[string]map[string]string{"wf": {"ATTEMPTS": "3", "BACKOFF_MS": "50"}},
		WallClock: 250 * time.Millisecond,
	})
	var script []string
	for i := range 8 {
		script = append(script, "slow s"+strconv.Itoa(i)+" 150")
	}
	n.expect("POST", wfPath("start", "wf", "cut"), strings.Join(script, "; "), 200, "running wake=no waiting= positions=0 output=- error=\n")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := n.do("POST", wfPath("status", "wf", "cut"), "")
		if strings.HasPrefix(body, "completed") {
			break
		}
		if strings.HasPrefix(body, "failed") || time.Now().After(deadline) {
			t.Fatalf("the workflow: %q", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
