package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// drainLoad posts to counter/k0..k7 through every node until stop, and
// keeps each acknowledged value by actor.
type drainLoad struct {
	mu     sync.Mutex
	acked  map[string][]int
	others map[int]int // answers other than 200, by status
	wg     sync.WaitGroup
	stop   chan struct{}
}

func startDrainLoad(urls ...string) *drainLoad {
	l := &drainLoad{acked: map[string][]int{}, others: map[int]int{}, stop: make(chan struct{})}
	for i, u := range urls {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for j := i; ; j++ {
				select {
				case <-l.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				name := fmt.Sprintf("k%d", j%8)
				resp, err := http.Post(u+"/actor/counter/"+name, "", nil)
				if err != nil {
					continue
				}
				var body strings.Builder
				buf := make([]byte, 64)
				for {
					n, err := resp.Body.Read(buf)
					body.Write(buf[:n])
					if err != nil {
						break
					}
				}
				resp.Body.Close()
				l.mu.Lock()
				if v, err := strconv.Atoi(strings.TrimSpace(body.String())); resp.StatusCode == 200 && err == nil {
					l.acked[name] = append(l.acked[name], v)
				} else {
					l.others[resp.StatusCode]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// end stops the load and checks that no acknowledged write was lost: each
// actor's value now is at least every value acknowledged, and no value was
// acknowledged twice.
func (l *drainLoad) end(t *testing.T, url string) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	for name, vs := range l.acked {
		r := ask(t, "GET", url+"/actor/counter/"+name)
		now, err := strconv.Atoi(r.body)
		if r.code != 200 || err != nil {
			t.Fatalf("counter/%s after the load: %+v", name, r)
		}
		seen := map[int]bool{}
		for _, v := range vs {
			if v > now || seen[v] {
				t.Errorf("counter/%s: %d acknowledged (%d times) but the actor is at %d: a write was lost", name, v, len(vs), now)
			}
			seen[v] = true
		}
	}
	t.Logf("acknowledged writes by actor: %d actors; other answers by status: %v", len(l.acked), l.others)
}

// stateOf reads node id's STATE from wasmkeep cluster status, run with
// env, and returns it with the whole output.
func stateOf(t *testing.T, env []string, bucketURL, id string) (string, string) {
	out, _ := clusterCmd(t, wasmkeepBinary(t), env, bucketURL, "status")
	m := regexp.MustCompile(`(?m)^` + id + `\s+yes\s+\S+\s+(\S+)`).FindStringSubmatch(out)
	if m == nil {
		return "", out
	}
	return m[1], out
}

// waitState waits until status shows node id in state want, and returns
// the states it saw on the way.
func waitState(t *testing.T, env []string, bucketURL, id, want string) []string {
	t.Helper()
	var seen []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, out := stateOf(t, env, bucketURL, id)
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
		if st == want {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s never showed %s (states seen: %q):\n%s", id, want, seen, out)
		}
	}
}

// A drained node (wasmkeep cluster drain, ADR 1051) hands what it holds to
// the other nodes under a load through every node, losing no acknowledged
// write: its actors end up held by b or c, its WebSocket closes with 1012
// (counted as a drain's) and its close event runs before the room goes, new actors asked for through it are created on b
// or c (an upgrade for a new room too), and status shows it draining (while an event it ran before the
// drain holds its actor), then drained. Undrained, it takes new actors
// again. The drain and undrain of an id no live node has are refused
// without --force.
func TestDrainHandsActorsOver(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b, c := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b"), newPeerNode(t, bucketURL, steadyLease, "c")
	a.args = append(a.args, "--actor", "room="+room(t), "--metrics-listen", "127.0.0.1:0")
	b.args = append(b.args, "--actor", "room="+room(t))
	c.args = append(c.args, "--actor", "room="+room(t))
	startNodes(t, a, b, c)
	bin, env := wasmkeepBinary(t), a.env
	for i := range 8 {
		if r := ask(t, "POST", fmt.Sprintf("%s/actor/counter/k%d", a.url, i)); r.code != 200 || r.node != "a" {
			t.Fatalf("counter/k%d through a: %+v, want it taken by a", i, r)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/room/lobby/", nil)
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, a.logs)
	}
	defer ws.CloseNow()
	wantCluster(t, bin, env, bucketURL, 1, []string{`refused: no live node has id "nosuch"`}, "drain", "nosuch")
	wantCluster(t, bin, env, bucketURL, 0, []string{`wrote control/drain/nosuch`}, "drain", "nosuch", "--force")
	wantCluster(t, bin, env, bucketURL, 0, []string{`deleted control/drain/nosuch`}, "undrain", "nosuch")
	wantCluster(t, bin, env, bucketURL, 1, []string{`refused`}, "undrain", "nosuch")

	load := startDrainLoad(a.url, b.url, c.url)
	slow := make(chan reply, 1)
	go func() { slow <- ask(t, "POST", a.url+"/actor/probe/slow/sleep?ms=4000") }()
	time.Sleep(200 * time.Millisecond) // the slow event under way on a: the drain waits for it
	wantCluster(t, bin, env, bucketURL, 0, []string{`wrote control/drain/a`}, "drain", "a")
	for err == nil { // what the room sent first, then the close
		_, _, err = ws.Read(ctx)
	}
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Errorf("a's socket as it drained: %v, want a 1012 close", err)
	}
	seen := waitState(t, env, bucketURL, "a", "drained")
	if len(seen) < 2 || seen[len(seen)-2] != "draining" {
		t.Errorf("a's states as it drained: %v, want draining, then drained", seen)
	}
	if r := <-slow; r.code != 200 || r.node != "a" {
		t.Errorf("the event a ran as the drain began: %+v, want it answered by a", r)
	}
	load.end(t, b.url)
	for i := range 8 {
		if r := ask(t, "GET", fmt.Sprintf("%s/actor/counter/k%d", a.url, i)); r.code != 200 || r.node == "a" || r.node == "" {
			t.Errorf("counter/k%d through drained a: %+v, want it held by b or c", i, r)
		}
	}
	for i := range 4 {
		if r := ask(t, "POST", fmt.Sprintf("%s/actor/counter/new%d", a.url, i)); r.code != 200 || r.body != "1" || r.node == "a" || r.node == "" {
			t.Errorf("a new actor through drained a: %+v, want it created on b or c", r)
		}
	}
	if r := ask(t, "GET", b.url+"/actor/room/lobby/closes"); r.code != 200 || !strings.Contains(r.body, "1012 the node hands its actors over") || r.node == "a" {
		t.Errorf("the room's close events after the drain: %+v, want its socket's 1012 close run on a before the hand-over", r)
	}
	room2, up, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/room/fresh/", nil)
	if err != nil {
		t.Fatalf("an upgrade for a new room through drained a: %v", err)
	}
	if holder := up.Header.Get(peers.NodeHeader); holder == "a" || holder == "" {
		t.Errorf("an upgrade for a new room through drained a answered by %q, want b or c", holder)
	}
	room2.CloseNow()
	resp, err := http.Get("http://" + metricsAddr(t, a.logs) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		page.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if v := metricValue(page.String(), `wasmkeep_websocket_owner_closes_total{reason="drain"}`); v < 1 {
		t.Errorf("sockets a closed as it drained: %v, want 1", v)
	}

	wantCluster(t, bin, env, bucketURL, 0, []string{`deleted control/drain/a`}, "undrain", "a")
	waitState(t, env, bucketURL, "a", "serving")
	if r := ask(t, "POST", a.url+"/actor/counter/after"); r.code != 200 || r.node != "a" {
		t.Errorf("a new actor through a undrained: %+v, want it taken by a", r)
	}
}

// A node drained with no other node of its app keeps serving what it
// holds and shows stuck, with status's warning; a new actor asked for
// through it is taken there (book ADR 0014).
func TestDrainAloneIsStuck(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	z := newPeerNode(t, bucketURL, steadyLease, "z")
	z.start()
	if r := ask(t, "POST", z.url+"/actor/counter/kept"); r.code != 200 || r.body != "1" {
		t.Fatalf("counter/kept: %+v", r)
	}
	bin := wasmkeepBinary(t)
	wantCluster(t, bin, z.env, bucketURL, 0, []string{`wrote control/drain/z`}, "drain", "z")
	waitState(t, z.env, bucketURL, "z", "stuck")
	wantCluster(t, bin, z.env, bucketURL, 0, []string{`warning: node z is stuck`}, "status")
	if r := ask(t, "POST", z.url+"/actor/counter/kept"); r.code != 200 || r.body != "2" || r.node != "z" {
		t.Errorf("the actor z holds, z stuck: %+v, want it still served by z", r)
	}
	if r := ask(t, "POST", z.url+"/actor/counter/fresh"); r.code != 200 || r.body != "1" || r.node != "z" {
		t.Errorf("a new actor through z stuck: %+v, want it taken by z (a drain never makes an actor unreachable)", r)
	}
}

// The acquire refuses an actor while the node takes none, whatever placed
// it here (every actor is placed here on this node): a new actor gets 503
// with Retry-After and is not created, the one it holds keeps serving (no
// peer takes it: stuck), and once the reason is withdrawn the new actor is
// taken.
func TestNotTakingRefusedAtTheAcquire(t *testing.T) {
	engineNeutral(t)
	tn, _ := clusterNodeOn(t, buckettest.NewMemory(buckettest.Flaws{}), "a", map[string]string{"counter": counter(t)})
	tn.expect("POST", "/actor/counter/held", "", 200, "1\n")
	tn.node.StopTaking("test")
	if got := tn.node.NotTaking(); len(got) != 1 || got[0] != "test" {
		t.Errorf("NotTaking() = %q, want [test]", got)
	}
	code, body, hdr := tn.doH("POST", "/actor/counter/fresh", "", nil)
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "takes no actor") {
		t.Errorf("a new actor on a node taking none: %d %q, Retry-After %q; want 503 saying so", code, body, hdr.Get("Retry-After"))
	}
	tn.expect("POST", "/actor/counter/held", "", 200, "2\n")
	tn.node.ResumeTaking("test")
	tn.expect("POST", "/actor/counter/fresh", "", 200, "1\n")
}

// A node that takes no actor runs no sweep pass: the overdue alarm of an
// actor nobody holds waits, its entry kept, until the node takes actors
// again, and then runs there.
func TestNotTakingSweepsNothing(t *testing.T) {
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	classes := map[string]string{"probe": probe(t)}
	a, _ := clusterNodeOn(t, mem, "a", classes)
	due := time.Now().Add(time.Second).UnixMilli()
	a.expect("GET", "/actor/probe/y/alarm-set?at="+strconv.FormatInt(due, 10), "", 200, "set")
	a.stop()
	b := sweepingNodeOn(t, mem, "b", classes, 200*time.Millisecond)
	b.node.StopTaking("test") // before its second listing, which the sweep waits for
	passes := func() float64 {
		rec := httptest.NewRecorder()
		b.node.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return max(0, metricValue(rec.Body.String(), `wasmkeep_alarm_sweeps_total{outcome="ok"}`))
	}
	time.Sleep(time.Until(time.UnixMilli(due).Add(3 * time.Second))) // overdue past the sweep's margin
	if p := passes(); p != 0 {
		t.Fatalf("a node taking no actor ran %v sweep passes, want none", p)
	}
	b.node.ResumeTaking("test")
	waitFor(t, 10*time.Second, "y's alarm to run on b", func() bool {
		code, body := b.do("POST", "/actor/probe/y/query", "SELECT at FROM alarm_attempts")
		return code == 200 && strings.HasPrefix(body, "ok ") && body != "ok "
	})
}

// A drain hands each pending alarm to the peer that takes its actor (the
// take call, ADR 1052), so it fires there on time: a holds six probes
// with alarms, due from 2.5 s after the drain request (while it drains)
// to 9 s after it (drained by then). Each fires once, on b or c, within
// 2 s of its time; the alarm sweep alone is seconds later (its margin,
// then its period). Those due after the hand-over were handed off with
// it. Fails with the hand-off disabled (ADR 1052 gives the numbers), and
// with the hand-over's own hand-off disabled (those two left to the take
// as they fire).
func TestDrainHandsAlarmsOffOnTime(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b, c := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b"), newPeerNode(t, bucketURL, steadyLease, "c")
	startNodes(t, a, b, c)
	waitState(t, a.env, bucketURL, "c", "serving") // a lists its peers: the drain has takers
	start := time.Now()
	due := map[string]int64{}
	for i, after := range []time.Duration{2500, 3500, 4500, 6000, 7500, 9000} {
		name := fmt.Sprintf("al%d", i)
		due[name] = start.Add(after * time.Millisecond).UnixMilli()
		r := ask(t, "GET", fmt.Sprintf("%s/actor/probe/%s/alarm-set?durable=1&at=%d", a.url, name, due[name]))
		if r.code != 200 || r.node != "a" {
			t.Fatalf("probe/%s's alarm through a: %+v, want it taken by a", name, r)
		}
	}
	wantCluster(t, wasmkeepBinary(t), a.env, bucketURL, 0, []string{`wrote control/drain/a`}, "drain", "a")
	// Those due after the hand-over were taken at the hand-over, not as
	// they came due on a's timer (which a take as they fire does too).
	time.Sleep(time.Until(start.Add(7 * time.Second)))
	for _, name := range []string{"al4", "al5"} {
		if !regexp.MustCompile(`alarm handed off: the peer took the actor" actor=default/probe/` + name + ` `).MatchString(a.logs.String()) {
			t.Errorf("probe/%s, due in %d ms, was not handed off as a handed it over:\n%s", name, due[name]-time.Now().UnixMilli(), a.logs)
		}
	}
	time.Sleep(time.Until(start.Add(11 * time.Second)))
	for name, at := range due {
		if late, ok := alarmRanOnce(t, b.url, name, at, "11 s after the drain request", "b", "c"); ok {
			t.Logf("probe/%s's alarm ran %d ms after its time", name, late)
		}
	}
}

// alarmRanOnce asks through the node at url when probe/name's alarm ran:
// once, within 2 s of at, held by one of the nodes holders (failing the
// test otherwise, saying when it asked); it returns how late it ran.
func alarmRanOnce(t *testing.T, url, name string, at int64, when string, holders ...string) (int64, bool) {
	t.Helper()
	resp, err := http.Post(url+"/actor/probe/"+name+"/query", "text/plain", strings.NewReader("SELECT at FROM alarm_attempts"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := reply{resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get(peers.NodeHeader)}
	rows, ok := strings.CutPrefix(r.body, "ok ") // no table: never ran
	ran := strings.Split(rows, ",")
	if r.code != 200 || !slices.Contains(holders, r.node) || !ok || len(ran) != 1 {
		t.Errorf("probe/%s %s: %+v, want its alarm run once, held by one of %q", name, when, r, holders)
		return 0, false
	}
	v, err := strconv.ParseInt(ran[0], 10, 64)
	if err != nil || v-at > 2000 {
		t.Errorf("probe/%s's alarm ran at %s, %d ms after its time: want it within 2 s", name, ran[0], v-at)
		return 0, false
	}
	return v - at, true
}

// A drain hands off the alarm of an actor that hibernated before it (not
// resident, so never handed over) too, and the node shows drained only
// once it has (book ADR 0014: a node is not drained while an alarm it
// failed to hand off is still with it): drained and stopped, a leaves
// the alarm to b, which fires it within 2 s of its time. Fails without
// the hand-over's pass over the timer (handOffAlarms at the end of a
// pass): a shows drained at once, and b's sweep finds the alarm 4.5 s
// after its time at the earliest. (b is not asked about the actor before
// then: a request would restore it there and arm the alarm.) An alarm b
// refuses for good (404: a class b does not serve) is not sent again: it
// leaves a's timer, the sweep's; a still shows drained. Fails when such a
// refusal is tried again (a draining for ever).
func TestDrainHandsOffHibernatedAlarms(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b")
	a.args = append(a.args, "--actor", "stray="+probe(t), "--idle-timeout", "200ms", "--metrics-listen", "127.0.0.1:0")
	startNodes(t, a, b)
	waitState(t, a.env, bucketURL, "b", "serving") // a lists b: the drain has a taker
	due := time.Now().Add(8 * time.Second).UnixMilli()
	for _, actor := range []string{"probe/sleeper", "stray/x"} {
		at := due
		if actor == "stray/x" {
			at += time.Minute.Milliseconds()
		}
		if r := ask(t, "GET", fmt.Sprintf("%s/actor/%s/alarm-set?durable=1&at=%d", a.url, actor, at)); r.code != 200 || r.node != "a" {
			t.Fatalf("%s's alarm through a: %+v, want it taken by a", actor, r)
		}
	}
	aMetrics := "http://" + metricsAddr(t, a.logs) + "/metrics"
	waitFor(t, 5*time.Second, "a's actors to hibernate", func() bool {
		return metricValue(scrape(t, aMetrics), "wasmkeep_actors_resident") == 0
	})
	wantCluster(t, wasmkeepBinary(t), a.env, bucketURL, 0, []string{`wrote control/drain/a`}, "drain", "a")
	waitState(t, a.env, bucketURL, "a", "drained")
	a.stop()
	if time.Now().UnixMilli() > due {
		t.Fatal("a was stopped after the alarm's time: its own timer may have fired it")
	}
	if !strings.Contains(a.logs.String(), `alarm handed off: the peer took the actor" actor=default/probe/sleeper `) {
		t.Errorf("a did not hand probe/sleeper's alarm off before it showed drained:\n%s", a.logs)
	}
	if n := strings.Count(a.logs.String(), `the peer refuses the actor; the alarm is left to the sweep" actor=default/stray/x `); n != 1 {
		t.Errorf("a logged b's refusal of stray/x %d times, want once:\n%s", n, a.logs)
	}
	time.Sleep(time.Until(time.UnixMilli(due).Add(2500 * time.Millisecond)))
	if late, ok := alarmRanOnce(t, b.url, "sleeper", due, "2.5 s after its time, a stopped", "b"); ok {
		t.Logf("probe/sleeper's alarm ran %d ms after its time", late)
	}
}
