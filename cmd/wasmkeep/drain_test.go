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

// A drained node (wasmkeep cluster drain, ADR 1051) hands the 200 actors
// it holds to the other nodes under a load through every node (issue 28):
// 180 counters, each written through it, 8 of them under the load; 10
// rooms with a socket open each; 9 probes with alarms due from the drain
// request to after the drain, and one in a slow event as the drain
// begins. No acknowledged write is lost on any of them. Each socket
// closes with 1012 (counted as a drain's) and its client, reconnecting
// through a, b or c, reaches the same room on b or c: the room's close
// log holds what it kept before the drain, the 1012 close (its event run
// on a before the hand-over), then the reconnected client's close. Each
// alarm runs once, within 2 s of its time, its actor held by b or c
// after: one due before its actor's hand-over runs on a, which holds it
// (the hand-over takes actors in no order), none due after a drained
// does. Fails with the alarm hand-off disabled (a never drained). New
// actors asked for through a are created on b or c (an upgrade for a new
// room too), and status shows a draining (while the slow event holds its
// actor), then drained. Drained, a holds nothing, no socket and no
// parked record: stopped then (SIGTERM), it leaves with no release
// pending (a stop logs nothing else countable), and every actor answers
// at once from b or c with no 5xx. Restarted, it starts
// drained; undrained, it takes new actors again. The drain and undrain of
// an id no live node has are refused without --force.
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
	waitState(t, env, bucketURL, "c", "serving") // a lists its peers: the drain has takers
	began := time.Now()
	wantCluster(t, bin, env, bucketURL, 1, []string{`refused: no live node has id "nosuch"`}, "drain", "nosuch")
	wantCluster(t, bin, env, bucketURL, 0, []string{`wrote control/drain/nosuch`}, "drain", "nosuch", "--force")
	wantCluster(t, bin, env, bucketURL, 0, []string{`deleted control/drain/nosuch`}, "undrain", "nosuch")
	wantCluster(t, bin, env, bucketURL, 1, []string{`refused`}, "undrain", "nosuch")

	// The 180 counters: k0..k7 take the load below.
	counters := make([]string, 180)
	for i := range counters {
		counters[i] = fmt.Sprintf("n%03d", i)
		if i < 8 {
			counters[i] = fmt.Sprintf("k%d", i)
		}
	}
	acked := make([]int, len(counters))
	forEach(counters, 8, func(i int, name string) {
		r := ask(t, "POST", a.url+"/actor/counter/"+name)
		if r.code != 200 || r.node != "a" {
			t.Errorf("counter/%s through a: %+v, want it taken by a", name, r)
		}
		acked[i], _ = strconv.Atoi(r.body)
	})
	// The 10 rooms: in each a first client leaves with a code and reason
	// that tell the rooms apart in their close logs; a second stays.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // to the clients' reconnects, on a loaded machine
	defer cancel()
	roomURL := func(n *bucketNode, name string) string {
		return "ws" + strings.TrimPrefix(n.url, "http") + "/actor/room/" + name + "/"
	}
	const rooms = 10
	closes := make([]chan error, rooms) // how each staying client's socket ended
	for i := range rooms {
		name := fmt.Sprintf("r%d", i)
		first, _, err := websocket.Dial(ctx, roomURL(a, name), nil)
		if err != nil {
			t.Fatalf("dial room/%s: %v\n%s", name, err, a.logs)
		}
		first.Close(websocket.StatusCode(4000+i), "left "+name)
		ws, _, err := websocket.Dial(ctx, roomURL(a, name), nil)
		if err != nil {
			t.Fatalf("dial room/%s: %v\n%s", name, err, a.logs)
		}
		defer ws.CloseNow()
		closes[i] = make(chan error, 1)
		go func() { // what the room sends, then the close
			for {
				if _, _, err := ws.Read(ctx); err != nil {
					closes[i] <- err
					return
				}
			}
		}()
		waitFor(t, 10*time.Second, "room/"+name+"'s first close event", func() bool {
			return ask(t, "GET", a.url+"/actor/room/"+name+"/closes").body == fmt.Sprintf("%d left %s", 4000+i, name)
		})
	}
	// The 9 probes with alarms, due from a's first pass over its drain
	// request (within a lease period of it) to after the drain (which
	// the slow event keeps going for 4 s at least).
	drainAt := time.Now()
	due := map[string]int64{}
	for i := range 9 {
		name := fmt.Sprintf("al%d", i)
		due[name] = drainAt.Add(time.Duration(2000+i*700) * time.Millisecond).UnixMilli()
		if r := ask(t, "GET", fmt.Sprintf("%s/actor/probe/%s/alarm-set?durable=1&at=%d", a.url, name, due[name])); r.code != 200 || r.node != "a" {
			t.Fatalf("probe/%s's alarm through a: %+v, want it taken by a", name, r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("a holds 200 actors, %v after the nodes started", time.Since(began).Round(time.Millisecond))

	load := startDrainLoad(a.url, b.url, c.url)
	slow := make(chan reply, 1)
	go func() { slow <- ask(t, "POST", a.url+"/actor/probe/slow/sleep?ms=4000") }()
	time.Sleep(200 * time.Millisecond) // the slow event under way on a: the drain waits for it
	wantCluster(t, bin, env, bucketURL, 0, []string{`wrote control/drain/a`}, "drain", "a")
	for i, end := range closes {
		select {
		case err := <-end:
			if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
				t.Errorf("room/r%d's socket on a as it drained: %v, want a 1012 close", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("room/r%d's socket on a was not closed as it drained", i)
		}
	}
	seen := waitState(t, env, bucketURL, "a", "drained")
	drained := time.Now()
	t.Logf("a drained %v after the drain request", drained.Sub(drainAt).Round(time.Millisecond))
	if len(seen) < 2 || seen[len(seen)-2] != "draining" {
		t.Errorf("a's states as it drained: %v, want draining, then drained", seen)
	}
	if r := <-slow; r.code != 200 || r.node != "a" {
		t.Errorf("the event a ran as the drain began: %+v, want it answered by a", r)
	}
	load.end(t, b.url)

	// Each room's client reconnects, through a, b or c, to the room on b
	// or c, which still has it: the room sends only to its own clients.
	for i := range rooms {
		name := fmt.Sprintf("r%d", i)
		ws, up, err := websocket.Dial(ctx, roomURL([]*bucketNode{a, b, c}[i%3], name), nil)
		if err != nil {
			t.Errorf("room/%s's client reconnecting: %v", name, err)
			continue
		}
		if holder := up.Header.Get(peers.NodeHeader); holder != "b" && holder != "c" {
			t.Errorf("room/%s's client reconnected to node %q, want b or c", name, holder)
		}
		_, hello, err := ws.Read(ctx)
		if err == nil {
			err = ws.Write(ctx, websocket.MessageText, []byte("back in "+name))
		}
		_, echo, err2 := ws.Read(ctx)
		if err != nil || err2 != nil || string(hello) != "welcome 1" || string(echo) != "back in "+name {
			t.Errorf("room/%s reconnected: %q, %q (%v, %v), want its welcome and the message sent back", name, hello, echo, err, err2)
		}
		ws.Close(websocket.StatusNormalClosure, "back")
	}
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
	fresh, up, err := websocket.Dial(ctx, roomURL(a, "fresh"), nil)
	if err != nil {
		t.Fatalf("an upgrade for a new room through drained a: %v", err)
	}
	if holder := up.Header.Get(peers.NodeHeader); holder == "a" || holder == "" {
		t.Errorf("an upgrade for a new room through drained a answered by %q, want b or c", holder)
	}
	fresh.CloseNow()

	// Drained, a holds nothing (its state says: no hold, no release
	// pending), no socket and no parked record: stopped, it leaves with no
	// release left pending (nothing else of a stop is logged), and every
	// actor answers at once from b or c, with no 5xx.
	aMetrics := "http://" + metricsAddr(t, a.logs) + "/metrics"
	waitFor(t, 5*time.Second, "the sockets a relayed to end", func() bool {
		return metricValue(scrape(t, aMetrics), "wasmkeep_websockets_open") == 0
	})
	page := scrape(t, aMetrics)
	if v := metricValue(page, `wasmkeep_websocket_owner_closes_total{reason="drain"}`); v != rooms {
		t.Errorf("sockets a closed as it drained: %v, want %d", v, rooms)
	}
	if v := metricValue(page, "wasmkeep_parked_records"); v != 0 {
		t.Errorf("parked records on a drained: %v, want 0", v)
	}
	// An alarm due before its actor's hand-over runs on a, which holds
	// it; none due after a drained can.
	onA, dueBefore := max(0, metricValue(page, `wasmkeep_events_total{class="probe",kind="alarm",outcome="ok"}`)), 0
	for _, at := range due {
		if at < drained.UnixMilli() {
			dueBefore++
		}
	}
	if onA > float64(dueBefore) {
		t.Errorf("%v alarms ran on a, but only %d were due before it showed drained", onA, dueBefore)
	}
	t.Logf("alarms run on a before their actors' hand-over: %v of the %d due before a drained", onA, dueBefore)
	a.stop()
	if strings.Contains(a.logs.String(), "leaving the cluster") || strings.Contains(a.logs.String(), "released parked ownership records") {
		t.Errorf("a, drained, had something to hand over as it stopped:\n%s", a.logs)
	}
	forEach(counters, 8, func(i int, name string) {
		r := ask(t, "GET", []*bucketNode{b, c}[i%2].url+"/actor/counter/"+name)
		if v, err := strconv.Atoi(r.body); r.code != 200 || err != nil || v < acked[i] || (r.node != "b" && r.node != "c") {
			t.Errorf("counter/%s, a stopped: %+v, want at least the %d acknowledged, from b or c", name, r, acked[i])
		}
	})
	var last int64
	for _, at := range due {
		last = max(last, at)
	}
	time.Sleep(time.Until(time.UnixMilli(last).Add(2100 * time.Millisecond)))
	for i := range rooms {
		name := fmt.Sprintf("r%d", i)
		want := fmt.Sprintf("%d left %s\n1012 %s\n1000 back", 4000+i, name, "the node hands its actors over, reconnect")
		waitFor(t, 5*time.Second, "room/"+name+"'s close log, a stopped, to hold the reconnected client's close", func() bool {
			r := ask(t, "GET", []*bucketNode{b, c}[i%2].url+"/actor/room/"+name+"/closes")
			return r.code == 200 && r.body == want && (r.node == "b" || r.node == "c")
		})
	}
	for name, at := range due {
		if late, ok := alarmRanOnce(t, c.url, name, at, "after its time, a stopped", "b", "c"); ok {
			t.Logf("probe/%s's alarm ran %d ms after its time", name, late)
		}
	}
	if r := ask(t, "GET", b.url+"/actor/probe/slow/hits"); r.code != 200 || (r.node != "b" && r.node != "c") {
		t.Errorf("probe/slow, a stopped: %+v, want it served by b or c", r)
	}

	// Restarted, a starts drained (it claims nothing); undrained, it takes
	// new actors again.
	a.start()
	waitState(t, env, bucketURL, "a", "drained")
	wantCluster(t, bin, env, bucketURL, 0, []string{`deleted control/drain/a`}, "undrain", "a")
	waitState(t, env, bucketURL, "a", "serving")
	if r := ask(t, "POST", a.url+"/actor/counter/after"); r.code != 200 || r.node != "a" {
		t.Errorf("a new actor through a undrained: %+v, want it taken by a", r)
	}
	t.Logf("the test took %v after the nodes started", time.Since(began).Round(time.Millisecond))
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
