package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The kill test (issue 15, "Tests"; the book's "Lost writes" is the
// model): three `wasmkeep serve` processes on one bucket, clients writing
// unique tokens with exec-durable (the probe's /token) through a node
// picked at random, to 100 actors, while each node in turn is killed with
// SIGKILL and started again; the second pass also deletes the killed
// node's data directory before it starts. After every restart, and once
// more at the end, every actor's tokens are read back through the cluster:
// an acknowledged token missing is a lost write, a token held twice was
// applied twice. A write that got no answer (503, 504, a broken
// connection) may be there or not, but never twice.
//
// The control runs the same kill and check on a build with the early-ack
// fault (kernel/node/fault_earlyack.go, -tags wasmkeep_faults): exec-durable
// answers before the bucket acknowledged, and the upload waits a second
// after the answer. It must lose acknowledged tokens, or the check cannot
// see a loss and the test fails.

// killSizes are how much a kill run does.
type killSizes struct {
	actors, workers int
	// passes over the three nodes, each killed in turn: the first pass
	// keeps the killed node's data directory, the second deletes it, and
	// so on alternately (wipeAll: every pass deletes it).
	passes  int
	wipeAll bool
}

// killTestLong is KILL_TEST_LONG=1: more passes, more tokens, VersityGW too.
func killTestLong() bool { return os.Getenv("KILL_TEST_LONG") == "1" }

// killEarlyAckEnv turns the control build's fault on (fault_earlyack.go):
// each early answer's upload held a second.
const killEarlyAckEnv = "WASMKEEPTEST_EARLY_ACK=1s"

func TestClusterKill(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	long := killTestLong()
	size := killSizes{actors: 100, workers: 12, passes: 2}
	if long {
		size.passes, size.workers = 8, 16
	}
	// Each run has its own nodes, bucket and data directories: side by
	// side, as they mostly wait on kills and restarts.
	t.Run("bucket-fs", func(t *testing.T) {
		t.Parallel()
		killRun(t, wasmkeepBinary(t), "file://"+memDir(t), nil, size).requireNoLoss(t)
	})
	if long {
		t.Run("bucket-s3", func(t *testing.T) {
			t.Parallel()
			srv := startS3(t)
			killRun(t, wasmkeepBinary(t), "s3://"+srv.NewBucket(t), srv.Environ(), killSizes{actors: 100, workers: 12, passes: 2}).requireNoLoss(t)
		})
	}
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		// One pass, each kill deleting the data directory: the nodes
		// answer writes they have not shipped.
		r := killRun(t, buildWasmkeep(t, "wasmkeep_faults"), "file://"+memDir(t), []string{killEarlyAckEnv},
			killSizes{actors: 100, workers: 12, passes: 1, wipeAll: true})
		if len(r.twice)+len(r.unknown)+len(r.unread) > 0 {
			r.requireNoLoss(t)
		}
		if r.lostCount == 0 {
			t.Fatalf("the control lost no acknowledged token (%d acknowledged, %d kills): the check cannot see a loss", r.acked, r.kills)
		}
		t.Logf("the control lost %d acknowledged tokens, as it must: %s", r.lostCount, r.lost[0])
	})
}

// tokenLedger is what the clients know of each actor's tokens: every
// token sent (each once, never again), the ones acknowledged, and the ones
// a read found.
type tokenLedger struct {
	mu     sync.Mutex
	seq    int
	actors map[string]*tokenAccount
}

type tokenAccount struct {
	sent, acked, seen map[string]bool
	// reported: the tokens a check found lost, twice or never sent, each
	// counted once over the run
	reported map[string]bool
}

func newTokenLedger(names []string) *tokenLedger {
	l := &tokenLedger{actors: map[string]*tokenAccount{}}
	for _, n := range names {
		l.actors[n] = &tokenAccount{sent: map[string]bool{}, acked: map[string]bool{}, seen: map[string]bool{}, reported: map[string]bool{}}
	}
	return l
}

// token is a new token for the actor, counted as sent: once sent, it may
// be applied.
func (l *tokenLedger) token(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	tok := "t" + strconv.Itoa(l.seq)
	l.actors[name].sent[tok] = true
	return tok
}

func (l *tokenLedger) acknowledged(name, tok string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.actors[name].acked[tok] = true
}

// totals are the tokens sent and acknowledged over every actor.
func (l *tokenLedger) totals() (sent, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.actors {
		sent, acked = sent+len(a.sent), acked+len(a.acked)
	}
	return sent, acked
}

// tokenVerdict is what one read of every actor says against the ledger.
type tokenVerdict struct {
	checked   int      // acknowledged tokens found
	unacked   int      // tokens found that got no answer (allowed, once)
	lostCount int      // acknowledged tokens missing (each counted by the first check that misses it)
	lost      []string // the actors that lost, and how many
	twice     []string // a token held more than once
	unknown   []string // a token never sent
	vanished  []string // a token an earlier read found, missing now
	unread    []string // an actor not read
	acked     int      // tokens acknowledged when the reads began
	kills     int
}

// check reads every actor's tokens through pick's nodes (each actor's
// acknowledged tokens taken before its read is sent, so writes may go on
// meanwhile) and compares them with the ledger.
func (l *tokenLedger) check(pick func() string) tokenVerdict {
	l.mu.Lock()
	names := make([]string, 0, len(l.actors))
	for n := range l.actors {
		names = append(names, n)
	}
	l.mu.Unlock()
	sort.Strings(names)
	var out tokenVerdict // written under l.mu
	_, out.acked = l.totals()
	forEach(names, 25, func(_ int, n string) {
		l.mu.Lock()
		a := l.actors[n]
		acked := make(map[string]bool, len(a.acked))
		for tok := range a.acked {
			acked[tok] = true
		}
		l.mu.Unlock()
		found, err := readTokens(pick, n)
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			out.unread = append(out.unread, n+": "+err.Error())
			return
		}
		times := map[string]int{}
		for _, tok := range found {
			times[tok]++
		}
		lost := 0
		for tok := range acked {
			if times[tok] == 0 && !a.reported[tok] {
				a.reported[tok] = true
				lost++
			}
		}
		if lost > 0 {
			out.lostCount += lost
			out.lost = append(out.lost, fmt.Sprintf("%s: %d of %d acknowledged tokens missing", n, lost, len(acked)))
		}
		for tok, k := range times {
			switch {
			case a.reported[tok]:
			case !a.sent[tok]:
				a.reported[tok] = true
				out.unknown = append(out.unknown, fmt.Sprintf("%s: %q was never sent", n, tok))
			case k > 1:
				a.reported[tok] = true
				out.twice = append(out.twice, fmt.Sprintf("%s: %s %d times", n, tok, k))
			}
			if acked[tok] {
				out.checked++
			} else {
				out.unacked++
			}
			a.seen[tok] = true
		}
		for tok := range a.seen {
			if times[tok] == 0 {
				delete(a.seen, tok)
				out.vanished = append(out.vanished, fmt.Sprintf("%s: %s (acknowledged: %v)", n, tok, a.acked[tok]))
			}
		}
	})
	return out
}

// readTokens reads an actor's tokens through a node pick chooses, again
// through another while it gets no 200 (a node killed, an actor not taken
// over yet), for up to about 30 s.
func readTokens(pick func() string, name string) ([]string, error) {
	var last string
	for try := 0; try < 60; try++ {
		if try > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		code, _, body, err := answer("GET", pick()+"/actor/probe/"+name+"/tokens")
		if err == nil && code == 200 {
			return strings.Fields(body), nil
		}
		last = fmt.Sprintf("%v %d %q", err, code, body)
	}
	return nil, fmt.Errorf("no read in 60 tries, the last: %s", last)
}

// requireNoLoss fails the test on a lost, doubled, unknown or vanished
// token, or an actor not read.
func (v tokenVerdict) requireNoLoss(t *testing.T) {
	t.Helper()
	if len(v.lost)+len(v.twice)+len(v.unknown)+len(v.vanished)+len(v.unread) == 0 {
		return
	}
	t.Fatalf("lost %d acknowledged tokens: %s\napplied twice: %s\nnever sent: %s\nfound once, then missing: %s\nactors not read: %s",
		v.lostCount, few(v.lost), few(v.twice), few(v.unknown), few(v.vanished), few(v.unread))
}

// few is the first five of a list, and how many more.
func few(s []string) string {
	if len(s) <= 5 {
		return strings.Join(s, "; ")
	}
	return strings.Join(s[:5], "; ") + fmt.Sprintf("; and %d more", len(s)-5)
}

// add folds a check's findings into a run's.
func (v *tokenVerdict) add(w tokenVerdict) {
	v.lostCount += w.lostCount
	v.lost = append(v.lost, w.lost...)
	v.twice = append(v.twice, w.twice...)
	v.unknown = append(v.unknown, w.unknown...)
	v.vanished = append(v.vanished, w.vanished...)
	v.unread = append(v.unread, w.unread...)
}

// killCluster is the run's three nodes and where each listens now (a
// restart listens on a new port).
type killCluster struct {
	nodes []*bucketNode
	mu    sync.Mutex
	urls  []string
}

// pick is the URL of a node chosen at random, killed or not.
func (c *killCluster) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.urls[rand.IntN(len(c.urls))]
}

func (c *killCluster) start(i int) {
	c.nodes[i].start()
	c.mu.Lock()
	c.urls[i] = c.nodes[i].url
	c.mu.Unlock()
}

// startAll starts every node, side by side: each first start compiles
// the classes and waits for the node id check.
func (c *killCluster) startAll(t *testing.T) {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.start(i) // a failure ends this goroutine, with the test failed
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// lines is each node's log lines that name any of words, first: what a
// failure is about, before whole logs a CI report may cut.
func (c *killCluster) lines(words ...string) string { return logLines(c.nodes, words...) }

// logLines is each of nodes' log lines that name any of words.
func logLines(nodes []*bucketNode, words ...string) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "node %s, lines naming %q:\n", n.id(), words)
		for line := range strings.SplitSeq(n.logs.String(), "\n") {
			if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
	}
	return b.String()
}

func (c *killCluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "node %s:\n%s\n", n.args[len(n.args)-1], n.logs)
	}
	return b.String()
}

// killRun runs bin as three nodes on bucketURL (env on top of the
// shortLease timings), writes tokens to size.actors actors while it kills
// and restarts each node in turn, size.passes times, checking after every
// restart and once more at the end, when the writes stopped. It returns
// the findings of every check (the last's counts); the caller decides.
func killRun(t *testing.T, bin, bucketURL string, env []string, size killSizes) tokenVerdict {
	c := &killCluster{urls: make([]string, 3)}
	setup := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		n := newPeerNode(t, bucketURL, env, id)
		n.bin = bin
		c.nodes = append(c.nodes, n)
	}
	c.startAll(t)
	names := make([]string, size.actors)
	for i := range names {
		names[i] = fmt.Sprintf("k%03d", i)
	}
	l := newTokenLedger(names)
	t.Logf("three nodes ready in %v", time.Since(setup).Round(time.Millisecond))
	write := func(ctx context.Context, name string) string {
		tok := l.token(name)
		code, _, body, err := answer("POST", c.pick()+"/actor/probe/"+name+"/token?t="+tok)
		if err == nil && code == 200 {
			l.acknowledged(name, tok)
			return ""
		}
		if ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond) // a client's pause before its next try
		}
		return fmt.Sprintf("%s: %v %d %q", name, err, code, body)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	begin := time.Now()
	done := writers(ctx, names, 0, size.workers, write)

	rng := rand.New(rand.NewPCG(durabilitySeed(t), 0))
	var run tokenVerdict
	wiped := 0
	for pass := range size.passes {
		wipe := size.wipeAll || pass%2 == 1
		for i, n := range c.nodes {
			before := time.Duration(500+rng.IntN(1000)) * time.Millisecond
			time.Sleep(before)
			sent0, acked0 := l.totals()
			n.kill()
			killed := time.Now()
			run.kills++
			if wipe {
				n.wipe()
				wiped++
			}
			// Started again at once (its actors are not taken yet, the
			// node id check waits for the fence) or once others took them.
			down := time.Duration(rng.IntN(2500)) * time.Millisecond
			time.Sleep(down)
			c.start(i)
			ready := time.Since(killed)
			sent1, acked1 := l.totals()
			v := l.check(c.pick)
			run.add(v)
			t.Logf("kill %d (node %s, data directory %s) %v after the last; restarted after %v, ready %v after the kill; "+
				"%d tokens sent, %d acknowledged from the kill to the restart; the check: %d acknowledged tokens found, %d lost, %d twice, %d unread, %d found without an answer",
				run.kills, n.args[len(n.args)-1], map[bool]string{true: "deleted", false: "kept"}[wipe], before, down, ready.Round(time.Millisecond),
				sent1-sent0, acked1-acked0, v.checked, v.lostCount, len(v.twice), len(v.unread), v.unacked)
		}
	}
	cancel()
	failures := len(done())
	final := l.check(c.pick)
	run.add(final)
	sent, acked := l.totals()
	run.checked, run.unacked, run.acked = final.checked, final.unacked, acked
	t.Logf("%d kills (%d with the data directory deleted) in %v: %d tokens sent to %d actors, %d acknowledged, %d not (%d of those are there); "+
		"the last check found %d of %d acknowledged: %d lost over every check, %d applied twice, %d never sent, %d found then missing",
		run.kills, wiped, time.Since(begin).Round(time.Millisecond), sent, len(names), acked, failures, final.unacked,
		final.checked, acked, run.lostCount, len(run.twice), len(run.unknown), len(run.vanished))
	if run.lostCount+len(run.twice)+len(run.unknown)+len(run.unread) > 0 && !strings.Contains(strings.Join(env, " "), killEarlyAckEnv) {
		t.Log(c.logs())
	}
	if acked == 0 {
		t.Fatalf("no write was acknowledged\n%s", c.logs())
	}
	stopping := time.Now()
	for _, n := range c.nodes {
		n.stop()
	}
	t.Logf("stopped in %v", time.Since(stopping).Round(time.Millisecond))
	return run
}

// The fault hooks are in the test build only: the default build has no
// trace of the early-ack fault's variable (its own code's only string),
// nor of the skipped seq check's, which the build with -tags
// wasmkeep_faults has; and `go version -m`
// shows which tags each was built with.
func TestFaultHookOnlyInTestBuild(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	for bin, want := range map[string]bool{wasmkeepBinary(t): false, buildWasmkeep(t, "wasmkeep_faults"): true} {
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte("WASMKEEPTEST_EARLY_ACK")); got != want {
			t.Errorf("%s holds the early-ack fault: %v, want %v", bin, got, want)
		}
		if got := bytes.Contains(b, []byte("WASMKEEPTEST_SKIP_SEQ_CHECK")); got != want {
			t.Errorf("%s holds the skipped seq check's switch: %v, want %v", bin, got, want)
		}
		out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
		}
		if got := strings.Contains(string(out), "wasmkeep_faults"); got != want {
			t.Errorf("go version -m %s names the wasmkeep_faults tag: %v, want %v\n%s", bin, got, want, out)
		}
	}
}
