package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// answered is one answer of a node, with its Retry-After.
type answered struct {
	reply
	retryAfter string
	err        error
}

// sendOne sends one request with body and header (name, value; "" for
// none) and reads its answer.
func sendOne(method, u, body, name, value string) answered {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return answered{err: err}
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answered{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answered{reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)}, resp.Header.Get("Retry-After"), err}
}

// busyWave sends one slow request to each of count new probe actors
// (prefix0, prefix1, ...) through u at once, each keeping its actor busy
// for ms, and returns the answers.
func busyWave(u, prefix string, count, ms int) []answered {
	out := make([]answered, count)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			out[i] = sendOne("POST", fmt.Sprintf("%s/actor/probe/%s%d/sleep?ms=%d", u, prefix, i, ms), "", "", "")
		})
	}
	wg.Wait()
	return out
}

// roomSeen waits until status shows node id with room want in its
// heartbeat, then until the node whose metrics page is at metricsURL
// listed the heartbeats twice more, so its view has it.
func roomSeen(t *testing.T, n *bucketNode, bucketURL, metricsURL, id string, want int) {
	t.Helper()
	row := regexp.MustCompile(`(?m)^` + id + `\s+yes\s+\S+\s+serving\s+` + strconv.Itoa(want) + `\s`)
	waitFor(t, 20*time.Second, fmt.Sprintf("status to show node %s with room %d", id, want), func() bool {
		out, _ := clusterCmd(t, n.bin, n.env, bucketURL, "status")
		return row.MatchString(out)
	})
	listings := func() float64 { return metricValue(scrape(t, metricsURL), "wasmkeep_listing_seconds_count") }
	from := listings()
	waitFor(t, 20*time.Second, "two more listings", func() bool { return listings() >= from+2 })
}

// scrape reads a metrics page.
func scrape(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Relocation when a node is full (ADR 1054): with every instance slot of
// a (--max-instances 10) busy, the 40 new actors of a wave of 50 asked
// through a are started on b, which has room, and answer from there: no
// 503 where a alone gives 40 (checked by hand: with relocate's rule
// removed, 40 of the wave get 503). Such an actor is b's afterwards: a
// forwards its next request there. A request another node forwarded is never
// relocated again: with b's slots busy and a's heartbeat saying it has
// room, one marked forwarded gets b's 503, while a client's is started on
// a, its body with it, and so is an upgrade for a new room.
func TestRelocationWhenFull(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b")
	a.args = append(a.args, "--actor", "room="+room(t), "--max-instances", "10", "--metrics-listen", "127.0.0.1:0")
	b.args = append(b.args, "--actor", "room="+room(t), "--max-instances", "40", "--metrics-listen", "127.0.0.1:0")
	b.env = append(b.env, "WASMKEEP_NODE__IDLE_TIMEOUT=3s") // its slots free for its own wave below
	startNodes(t, a, b)
	aMetrics, bMetrics := "http://"+metricsAddr(t, a.logs)+"/metrics", "http://"+metricsAddr(t, b.logs)+"/metrics"
	roomSeen(t, a, bucketURL, aMetrics, "b", 40)

	const slow = 3000
	on, onB := map[string]int{}, -1
	for i, r := range busyWave(a.url, "w", 50, slow) {
		if r.err != nil || r.code != 200 || r.body != "slept" {
			t.Errorf("a request of the wave through a: %+v", r)
		}
		on[r.node]++
		if r.node == "b" {
			onB = i
		}
	}
	if onB >= 0 { // asked again through a before b's idle timeout: b holds it, a forwards there
		if r := sendOne("GET", fmt.Sprintf("%s/actor/probe/w%d/hits", a.url, onB), "", "", ""); r.code != 200 || r.node != "b" {
			t.Errorf("probe/w%d, started on b, asked again through a: %+v", onB, r)
		}
	}
	if on["b"] == 0 || on["a"]+on["b"] != 50 { // 10 and 40, unless a's slots freed while the wave arrived
		t.Errorf("the wave's actors answered from %v; want the ones a had no slot for from b", on)
	}
	if t.Failed() {
		t.Fatalf("a:\n%s\nb:\n%s", a.logs, b.logs)
	}
	if got := metricValue(scrape(t, aMetrics), `wasmkeep_relocations_total{outcome="served"}`); got != float64(on["b"]) {
		t.Errorf("a counted %v relocations served, want %d", got, on["b"])
	}

	// b's slots busy, a's idle (its heartbeat says room 10).
	roomSeen(t, b, bucketURL, bMetrics, "a", 10)
	waitFor(t, 10*time.Second, "the actors started on b to hibernate", func() bool {
		return metricValue(scrape(t, bMetrics), "wasmkeep_actors_resident") == 0
	})
	wakes := func() float64 { return metricValue(scrape(t, bMetrics), "wasmkeep_wakes_total") }
	woken := wakes()
	wave := make(chan []answered, 1)
	go func() { wave <- busyWave(b.url, "v", 40, 2*slow) }() // long enough for the two requests below
	waitFor(t, 10*time.Second, "b's 40 slots to be busy", func() bool { return wakes() >= woken+40 })
	if r := sendOne("POST", b.url+"/actor/probe/marked/echo", "hello", peers.ForwardedHeader, "a"); r.code != 503 || r.node != "b" || r.retryAfter != "1" {
		t.Errorf("a request marked forwarded to a full b: %+v, want b's 503 with Retry-After: 1", r)
	}
	if r := sendOne("POST", b.url+"/actor/probe/back/echo", "hello", "", ""); r.code != 200 || r.node != "a" || r.body != "POST /echo? 5" {
		t.Errorf("a client's request to a full b: %+v, want it started on a, its body with it", r)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, up, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.url, "http")+"/actor/room/elsewhere/", nil)
	if err != nil {
		t.Errorf("an upgrade for a new room through a full b: %v", err)
	} else {
		ws.CloseNow()
		if got := up.Header.Get(peers.NodeHeader); got != "a" {
			t.Errorf("an upgrade for a new room through a full b was accepted by node %q, want a", got)
		}
	}
	for _, r := range <-wave {
		if r.code != 200 || r.node != "b" {
			t.Errorf("b's own wave: %+v", r)
		}
	}
}

// A node's heartbeat says its room (line 14): its instance slots not held
// by a busy instance, an idle actor's counted, since admission evicts it.
// Alone and full, a node in a cluster still answers 503 with Retry-After:
// no peer has room.
func TestRoomAndFullAlone(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	mem := buckettest.NewMemory(buckettest.Flaws{})
	z, m := clusterNode(t, mem, "z", node.Options{Classes: map[string]string{"probe": probe(t)}, MaxInstances: 2})
	go m.WatchPeers(t.Context())
	lease := func() nodelease.Object {
		r, err := nodelease.ReadObject(t.Context(), mem, "z")
		if err != nil || r.Err != nil {
			t.Fatalf("z's lease: %v %v", err, r.Err)
		}
		return r.Object
	}
	roomIs := func(want int, what string) { // in a write sent after the call: two writes later
		t.Helper()
		from := lease().Seq
		waitFor(t, 5*time.Second, fmt.Sprintf("two more heartbeats %s", what), func() bool { return lease().Seq >= from+2 })
		waitFor(t, 5*time.Second, fmt.Sprintf("room %d %s", want, what), func() bool { return lease().Info.Room == want })
	}
	roomIs(2, "with no actor")
	busy := func(name string) chan answered {
		done := make(chan answered, 1)
		go func() { done <- sendOne("POST", z.url+"/actor/probe/"+name+"/sleep?ms=5000", "", "", "") }()
		return done
	}
	first := busy("b1")
	roomIs(1, "with one actor busy")
	z.expect("GET", "/actor/probe/idle/hits", "", 200, "1")
	roomIs(1, "with one actor busy and one idle")
	second := busy("b2") // evicts the idle one
	roomIs(0, "with both slots busy")
	if r := sendOne("GET", z.url+"/actor/probe/third/hits", "", "", ""); r.code != 503 || r.retryAfter != "1" {
		t.Errorf("a new actor on a full node alone: %+v, want 503 with Retry-After: 1", r)
	}
	for _, done := range []chan answered{first, second} {
		if r := <-done; r.code != 200 {
			t.Errorf("a busy actor: %+v", r)
		}
	}
	if got := z.metric(`wasmkeep_relocations_total{outcome="served"}`) + z.metric(`wasmkeep_relocations_total{outcome="refused"}`) + z.metric(`wasmkeep_relocations_total{outcome="failed"}`); got != 0 {
		t.Errorf("%v relocations counted with no peer", got)
	}
}
