package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// A deploy and a rollback under load (issue 25, "Tests"): three real
// `wasmkeep serve --app acme/shop` processes on one bucket, steady load
// through every node, `wasmkeep deploy` publishing v2 of the schema guest
// and then `--rollback` (v3: v1's code at seq 3). No request fails that
// would not have failed without the deploy, each actor switches at its
// next event, and no event runs one version's code on what another
// version's code made.
//
// What an answer shows. The schema guest answers "version=V inits=I":
// V is the code that ran the event (a constant of the module: one
// instance is one version's code), I the versions whose on-init ran on the
// actor's data, in order, read from its database within that event. On-init
// runs whenever an instance of another module first runs on the data. The
// history this test makes allows exactly three answers, one per phase:
//
//	version=1 inits=1      v1 (phase 1)
//	version=2 inits=1,2    v2, after v2's on-init migrated v1's data (phase 2)
//	version=1 inits=1,2,1  v3, v1's code again after v2's (phase 3)
//
// Any other answer is an event whose code does not match the data's
// history: v1's code on data v2 migrated answers "version=1 inits=1,2,1"
// before the rollback was published, and v2's code on data v3 reached
// answers "version=2 inits=1,2,1,2"; an actor that goes back a phase ran
// old code after newer code. Each actor's requests are sent by one client,
// one at a time, so its answers are in the order its events ran.
//
// What makes it able to fail. The nodes use an idle timeout of 20 ms, so
// actors hibernate between their requests, which go through every node in
// turn: an actor's next event runs on whichever node the request reaches.
// Node c has v2's code in its compile cache before the test (precompile:
// as a node that ran it before), so it serves v2 within a heartbeat of the
// deploy, while a and b compile v2 for seconds under the load: for those
// seconds actors move from c, where v2 ran on them, to a node still on
// v1. Only the seq rule (kernel/node/deploy.go, upToDate) keeps that node
// from running v1 on them: it makes the event wait for its own follower
// (or answer 503 to retry) and run on v2. Without the rule those answers
// show above; the control runs the same steps on a build without the seq
// check (-tags wasmkeep_faults, WASMKEEPTEST_SKIP_SEQ_CHECK=1) and must
// see them. The rollback's hand-over is shorter (every node has v1's code
// compiled), its window only the nodes' heartbeat phases. A node serving
// a stale version shows twice: its heartbeat never says v2 and the wait
// for every node fails, or it says v2 and an actor's next answer through
// it (any answer to a request sent after every heartbeat said v2) is not
// v2's.
//
// What counts as failing. A request is answered 200, or 503 with
// Retry-After, which the client honours and retries: the documented
// contract of a node that cannot run the event yet. A deploy causes two
// such 503s: the seq rule's wait that no newer version ended within its
// bound (the node still compiling v2), and an event that took its class
// just before a swap retired that class's code ("the app's version
// changed as the event started"). Others come of any load that starves
// the cores, as the compiles do (a node that cannot take or hold an
// actor now). All are counted by phase and reason, and the request must
// still be answered 200 within 90 s (the bound of a hand-over here, on a
// machine the rest of the suite loads too). Anything else (a connection
// error, any other status) is a failure, and there must be none, neither
// in the 1.5 s of load before the deploy (the baseline: what fails
// without a deploy) nor after.
//
// Its wall time is mostly compiling: three nodes compile v1 at their
// start, the deploy compiles v2 with each runtime of the build, and each
// node compiles v2 again while the load runs (which is also what keeps
// the nodes on different versions for seconds, the window the seq rule
// has to hold in). The load itself is 1.5 s per phase plus the hand-overs.
// Not parallel: its compiles starve the cores, and the other cluster tests'
// 1 s leases lapsed beside it (TestFirstRequestRaceForwards, "the node lost
// the actor during the event", on a clean clone).
func TestDeployAndRollbackUnderLoad(t *testing.T) {
	engineNeutral(t)
	t.Run("seq rule", func(t *testing.T) {
		r := deployUnderLoad(t, wasmkeepBinary(t), nil)
		r.log(t)
		for _, f := range r.failed {
			t.Errorf("a request failed: %s", f)
		}
		for _, v := range r.violations {
			t.Errorf("%s", v)
		}
		for _, c := range r.coverage {
			t.Errorf("the load did not show it: %s", c)
		}
		if t.Failed() {
			t.Logf("nodes:\n%s", r.logs)
		}
	})
	t.Run("control", func(t *testing.T) {
		r := deployUnderLoad(t, buildWasmkeep(t, "wasmkeep_faults"), []string{"WASMKEEPTEST_SKIP_SEQ_CHECK=1"})
		r.log(t)
		if len(r.violations) == 0 {
			t.Fatalf("without the seq check no answer showed old code on newer data (%d actor moves during the hand-overs): the test cannot see the rule broken", r.moves)
		}
		t.Logf("without the seq check, as it must: %d answers show old code on newer data, the first: %s", len(r.violations), r.violations[0])
	})
}

// Phases of the deploy, as the schema guest's answers show them; each is
// the seq of its version.
const (
	phaseV1 = 1 + iota
	phaseV2
	phaseV3
)

var schemaAnswer = regexp.MustCompile(`^version=(\d+) inits=([\d,]*) hits=\d+ greeting=$`)

// phaseOf is the phase an answer shows, 0 for none this history allows.
func phaseOf(body string) int {
	m := schemaAnswer.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	return map[string]int{"1 1": phaseV1, "2 1,2": phaseV2, "1 1,2,1": phaseV3}[m[1]+" "+m[2]]
}

// loadAnswer is one request answered 200.
type loadAnswer struct {
	sent, got time.Time // the attempt that was answered
	phase     int
	node      string // the node that ran the event (x-wasmkeep-node)
	via       string // the node it was sent to
	body      string
}

// loadRetry is a 503 with Retry-After, which the client retried.
type loadRetry struct {
	at   time.Time
	body string
}

// steadyLoad is clients, each POSTing to its own actors of class s, one
// request at a time and a pause between two, each actor's requests
// through every node in turn.
type steadyLoad struct {
	urls  []string
	pause time.Duration
	stop  atomic.Bool
	wg    sync.WaitGroup
	start time.Time

	mu      sync.Mutex
	answers map[string][]loadAnswer // by actor, in order
	retries []loadRetry
	failed  []string
}

var loadClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// loadActor is actor i of client c.
func loadActor(c, i int) string { return fmt.Sprintf("c%d-%d", c, i) }

func (l *steadyLoad) run(clients, perClient int) {
	l.answers, l.start = map[string][]loadAnswer{}, time.Now()
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for round := 0; !l.stop.Load(); round++ {
				for i := range perClient {
					l.request(loadActor(c, i), (round+i+c)%len(l.urls))
					time.Sleep(l.pause)
				}
			}
		}()
	}
}

func (l *steadyLoad) end() {
	l.stop.Store(true)
	l.wg.Wait()
}

// request sends one POST to name through node via until it is answered
// 200, honouring each 503's Retry-After, for at most 90 s.
func (l *steadyLoad) request(name string, via int) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		sent := time.Now()
		resp, err := loadClient.Post(l.urls[via]+"/actor/s/"+name, "", nil)
		if err != nil {
			l.fail("%s through %s: %v", name, l.urls[via], err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got, body := time.Now(), strings.TrimSpace(string(b))
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		switch {
		case resp.StatusCode == 200:
			l.mu.Lock()
			l.answers[name] = append(l.answers[name], loadAnswer{sent: sent, got: got, phase: phaseOf(body),
				node: resp.Header.Get(peers.NodeHeader), via: l.urls[via], body: body})
			l.mu.Unlock()
			return
		case resp.StatusCode == 503 && retry > 0 && got.Before(deadline):
			l.mu.Lock()
			l.retries = append(l.retries, loadRetry{got, body})
			l.mu.Unlock()
			time.Sleep(time.Duration(retry) * time.Second)
		default:
			l.fail("%s through %s, sent %v into the load: %d %q (Retry-After %q)", name, l.urls[via],
				sent.Sub(l.start).Round(time.Millisecond), resp.StatusCode, body, resp.Header.Get("Retry-After"))
			return
		}
	}
}

func (l *steadyLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = append(l.failed, fmt.Sprintf(format, args...))
}

// deployRun is what one run of the steps showed.
type deployRun struct {
	failed     []string       // requests neither answered 200 nor 503 to retry
	retried    map[string]int // 503s with Retry-After, by when and body
	violations []string       // answers no correct history allows
	coverage   []string       // what the load failed to exercise
	answers    int
	moves      int                          // answers from another node than the actor's previous one, during hand-overs
	applied    map[string]map[int]time.Time // by node id: when it began serving each seq, from its log
	lead       time.Duration                // how long c served v2 before a and b both did
	handOver   [2]time.Duration
	wall       time.Duration
	logs       string
}

func (r deployRun) log(t *testing.T) {
	t.Logf("%d answers in %v; the hand-overs took %v (v2) and %v (rollback) from the deploy's start (c on v2 %v before a and b), %d actor moves between nodes during them; 503s retried: %v",
		r.answers, r.wall.Round(time.Millisecond), r.handOver[0].Round(time.Millisecond), r.handOver[1].Round(time.Millisecond), r.lead.Round(time.Millisecond), r.moves, r.retried)
}

// deployUnderLoad runs the steps on three nodes of serveBin (with env
// added to each) and returns what they showed.
func deployUnderLoad(t *testing.T, serveBin string, env []string) deployRun {
	began := time.Now()
	d := deployer{t: t, bin: wasmkeepBinary(t), dir: memDir(t)}
	v1, v2 := schemaV1(t), schemaV2(t)
	d.must("--actor", "s="+v1)
	bucketURL := "file://" + d.dir
	// A lease of 3 s rather than shortLease's 1 s, heartbeats (and reads of
	// current) every 333 ms all the same: the compiles below starve the
	// two cores for seconds, and a hold lost to that is no deploy's doing.
	lease := append([]string{"WASMKEEP_CLUSTER__TTL=3s", "WASMKEEP_CLUSTER__HEARTBEAT_PERIOD=333ms"}, env...)
	var (
		nodes    []*bucketNode
		urls     []string
		starting sync.WaitGroup
	)
	for _, id := range []string{"a", "b", "c"} {
		n := newBucketNode(t, bucketURL, lease)
		n.bin = serveBin
		// A cache of its own, as on three machines: c's holds v2's code, a's
		// and b's do not (the suite's servers share one by default).
		n.args = []string{"--app", "acme/shop", "--bucket", bucketURL, "--node-id", id, "--idle-timeout", "20ms", "--cache-dir", nodeCache(n)}
		nodes = append(nodes, n)
		starting.Add(1)
		go func() { // at once: each compiles v1
			defer starting.Done()
			if id == "c" {
				precompile(t, n, v2)
			}
			n.start()
		}()
	}
	starting.Wait()
	if t.Failed() { // a start failed, serveBinary said why
		t.FailNow()
	}
	for _, n := range nodes {
		urls = append(urls, n.url)
	}
	logs := func() string {
		var s strings.Builder
		for _, n := range nodes {
			fmt.Fprintf(&s, "--- node %s\n%s", n.args[5], n.logs)
		}
		return s.String()
	}
	statusEnv := append(append(withoutWasmkeepVars(), shortLease...), lease...)
	// everywhere waits until every node's heartbeat says it serves seq.
	everywhere := func(seq uint64) time.Time {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			out, _ := clusterCmd(t, d.bin, statusEnv, bucketURL, "status", "--json")
			var st struct {
				Nodes []struct {
					App  string
					Live bool
					Seq  uint64
				} `json:"nodes"`
			}
			json.Unmarshal([]byte(out), &st)
			serving := 0
			for _, n := range st.Nodes {
				if n.Live && n.App == "acme/shop" && n.Seq == seq {
					serving++
				}
			}
			if serving == len(nodes) {
				return time.Now() // every request sent from now on reaches a node serving seq
			}
			if time.Now().After(deadline) {
				t.Fatalf("not every node serves seq %d after 90 s:\n%s\n%s", seq, out, logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	const clients, perClient = 4, 4
	// Every actor starts on v1, each through a node of its own.
	for c := range clients {
		for i := range perClient {
			name := loadActor(c, i)
			if r := ask(t, "POST", urls[(c+i)%3]+"/actor/s/"+name); r.code != 200 || phaseOf(r.body) != phaseV1 {
				t.Fatalf("%s on v1: %+v\n%s", name, r, logs())
			}
		}
	}
	// The pause leaves the nodes some of the two cores to compile v2.
	load := &steadyLoad{urls: urls, pause: 30 * time.Millisecond}
	load.run(clients, perClient)
	t.Cleanup(load.end) // after a t.Fatal below, before the nodes are killed
	const steady = 1500 * time.Millisecond
	time.Sleep(steady) // the baseline: v1 only
	deploy2 := time.Now()
	d.must("--actor", "s="+v2)
	all2 := everywhere(2)
	time.Sleep(steady)
	rollback := time.Now()
	if out := d.must("--rollback"); !strings.Contains(out, "seq 3") {
		t.Fatalf("the rollback:\n%s", out)
	}
	all3 := everywhere(3)
	time.Sleep(steady)
	load.end()
	for _, n := range nodes {
		n.stop()
	}

	r := deployRun{failed: load.failed, retried: map[string]int{}, wall: time.Since(began), logs: logs(),
		handOver: [2]time.Duration{all2.Sub(deploy2), all3.Sub(rollback)}, applied: map[string]map[int]time.Time{}}
	for _, n := range nodes {
		r.applied[n.args[5]] = appliedAt(n.logs.String())
	}
	when := func(at time.Time) string {
		switch {
		case at.Before(deploy2):
			return "before the deploy"
		case at.Before(all2):
			return "v2 hand-over"
		case at.Before(rollback):
			return "v2"
		case at.Before(all3):
			return "rollback hand-over"
		}
		return "v3"
	}
	for _, re := range load.retries {
		r.retried[when(re.at)+": "+re.body]++
	}
	if len(load.answers) != clients*perClient {
		r.coverage = append(r.coverage, fmt.Sprintf("answers for %d actors, want %d", len(load.answers), clients*perClient))
	}
	for c := range clients {
		for i := range perClient {
			name := loadActor(c, i)
			r.check(name, load.answers[name], load.start, deploy2, all2, rollback, all3)
		}
	}
	if c, a, b := r.applied["c"][phaseV2], r.applied["a"][phaseV2], r.applied["b"][phaseV2]; !c.Before(a) || !c.Before(b) {
		r.coverage = append(r.coverage, fmt.Sprintf("node c, with v2 compiled ahead, did not serve v2 before a and b (c at %v, a at %v, b at %v)", c, a, b))
	} else {
		r.lead = min(a.Sub(c), b.Sub(c))
	}
	if r.moves == 0 {
		r.coverage = append(r.coverage, "no actor moved between nodes during a hand-over: nothing put the seq rule to work")
	}
	return r
}

// check adds to r what the answers of one actor show, given when the
// deploy started (deploy2), when every node served v2 (all2), when the
// rollback started and when every node served v3 (all3).
func (r *deployRun) check(name string, as []loadAnswer, start, deploy2, all2, rollback, all3 time.Time) {
	prev := loadAnswer{phase: phaseV1}
	var nextV2, nextV3 bool
	for i, a := range as {
		r.answers++
		at := fmt.Sprintf("%s, answer %d (sent %v into the load through %s, ran on node %s): %q", name, i+1,
			a.sent.Sub(start).Round(time.Millisecond), a.via, a.node, a.body)
		switch {
		case a.phase == 0:
			r.violations = append(r.violations, "an answer no history of v1, v2 and v3 allows (one version's code on what another's made): "+at)
		case a.phase < prev.phase:
			r.violations = append(r.violations, fmt.Sprintf("old code after newer code (phase %d after %d): %s", a.phase, prev.phase, at))
		case a.phase >= phaseV2 && a.got.Before(deploy2):
			r.violations = append(r.violations, "v2 before it was deployed: "+at)
		case a.phase == phaseV3 && a.got.Before(rollback):
			r.violations = append(r.violations, "v1's code on data v2 migrated, before any rollback: "+at)
		case a.sent.After(all2) && a.got.Before(rollback) && a.phase != phaseV2, a.sent.After(all3) && a.phase != phaseV3:
			r.violations = append(r.violations, "not the version every node's heartbeat said it served when the request was sent: "+at)
		case a.phase < phaseV3 && r.servedBefore(a.node, a.phase+1, a.sent):
			r.violations = append(r.violations, fmt.Sprintf("the actor did not switch at its next event: its node served phase %d before the request was sent: %s", a.phase+1, at))
		}
		nextV2 = nextV2 || a.sent.After(all2) && a.got.Before(rollback)
		nextV3 = nextV3 || a.sent.After(all3)
		handOver := a.sent.After(deploy2) && a.sent.Before(all2) || a.sent.After(rollback) && a.sent.Before(all3)
		if handOver && i > 0 && a.node != as[i-1].node {
			r.moves++
		}
		if a.phase != 0 {
			prev = a
		}
	}
	if !nextV2 || !nextV3 {
		r.coverage = append(r.coverage, fmt.Sprintf("%s: answered once every node served v2: %v; once every node served v3: %v", name, nextV2, nextV3))
	}
}

var servingVersion = regexp.MustCompile(`(?m)^time=(\S+) level=INFO msg="serving version" deployed=\S+ seq=(\d+) `)

// appliedAt reads from a node's log when it began serving each seq.
func appliedAt(log string) map[int]time.Time {
	at := map[int]time.Time{}
	for _, m := range servingVersion.FindAllStringSubmatch(log, -1) {
		when, err1 := time.Parse(time.RFC3339Nano, m[1])
		seq, err2 := strconv.Atoi(m[2])
		if err1 == nil && err2 == nil {
			at[seq] = when
		}
	}
	return at
}

// precompile has n's compile cache hold module's code, as a node that ran
// it before has: a process of n's binary and settings serving it alone on
// n's data directory, without a bucket, until it is ready.
func precompile(t *testing.T, n *bucketNode, module string) {
	var env []string
	for _, kv := range n.env {
		if !strings.HasPrefix(kv, "WASMKEEP_CLUSTER__") {
			env = append(env, kv)
		}
	}
	_, cmd, logs := serveBinary(t, n.bin, env, "--data-dir", n.data, "--cache-dir", nodeCache(n), "--actor", "s="+module)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the precompiling process: %v\n%s", err, logs)
	}
}

// nodeCache is n's own compile cache, in its data directory.
func nodeCache(n *bucketNode) string { return filepath.Join(n.data, "cache") }

// servedBefore reports whether node's log says it served seq before t: an
// event sent after that took a class of that seq or above where it ran.
// The log's time is written after the swap, to the millisecond: 5 ms
// covers its truncation.
func (r *deployRun) servedBefore(node string, seq int, t time.Time) bool {
	at, ok := r.applied[node][seq]
	return ok && at.Add(5*time.Millisecond).Before(t)
}
