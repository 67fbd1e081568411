package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// actorCmd runs wasmkeep actor ARGS --bucket bucketURL and fails the test
// unless it exits with code and its output matches every pattern.
func actorCmd(t *testing.T, env []string, bucketURL string, code int, patterns []string, args ...string) {
	t.Helper()
	cmd := exec.Command(wasmkeepBinary(t), append(append([]string{"actor"}, args...), "--bucket", bucketURL)...)
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	if got := cmd.ProcessState.ExitCode(); got != code {
		t.Errorf("actor %s: exit %d, want %d:\n%s", strings.Join(args, " "), got, code, out)
	}
	for _, p := range patterns {
		if !regexp.MustCompile(p).Match(out) {
			t.Errorf("actor %s: output does not match %q:\n%s", strings.Join(args, " "), p, out)
		}
	}
}

// post sends a POST with body and reads the answer.
func post(t *testing.T, u, body string) reply {
	t.Helper()
	resp, err := http.Post(u, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)}
}

// wasmkeep actor move (book ADR 0017; ADR 1052): a probe with an alarm
// and a room with a socket, both held by a, move to b under requests
// through a and c: no acknowledged write is lost, the socket closes with
// 1012 and reconnects to b, the alarm fires once on b on time, and the
// requests are done (their keys deleted). A move to an unknown node and a
// bad address are refused; one to a draining node or a dead one waits,
// the actor staying where it is; a name that was never an actor is not
// created, its request dropped.
func TestActorMove(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	dir := memDir(t)
	bucketURL := "file://" + dir
	a, b, c := newPeerNode(t, bucketURL, steadyLease, "a"), newPeerNode(t, bucketURL, steadyLease, "b"), newPeerNode(t, bucketURL, steadyLease, "c")
	for _, n := range []*bucketNode{a, b, c} {
		n.args = append(n.args, "--actor", "room="+room(t))
	}
	startNodes(t, a, b, c)
	env := a.env
	waitState(t, env, bucketURL, "c", "serving")
	due := time.Now().Add(9 * time.Second).UnixMilli()
	if r := ask(t, "GET", fmt.Sprintf("%s/actor/probe/mv/alarm-set?durable=1&at=%d", a.url, due)); r.code != 200 || r.node != "a" {
		t.Fatalf("probe/mv through a: %+v, want it taken by a", r)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/room/lobby/", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()

	actorCmd(t, env, bucketURL, 1, []string{`refused: no live node has id "nosuch"`}, "move", "default/default/probe/mv", "--to", "nosuch")
	actorCmd(t, env, bucketURL, 2, []string{`bad actor address "default/probe/mv"`}, "move", "default/probe/mv", "--to", "b")

	// The load: unique tokens written to probe/mv through a and c.
	var mu sync.Mutex
	var acked []string
	others := map[int]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, u := range []string{a.url, c.url} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				tok := fmt.Sprintf("%s-%d", u[len(u)-5:], i)
				resp, err := http.Post(u+"/actor/probe/mv/token?t="+tok, "", nil)
				if err != nil {
					continue
				}
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == 200 {
					acked = append(acked, tok)
				} else {
					others[resp.StatusCode]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	actorCmd(t, env, bucketURL, 0, []string{`wrote state/default/default/control/move/probe/6d76/b:`}, "move", "default/default/probe/mv", "--to", "b")
	actorCmd(t, env, bucketURL, 0, []string{`control/move/room/6c6f626279/b`}, "move", "default/default/room/lobby", "--to", "b")
	for err == nil {
		_, _, err = ws.Read(ctx)
	}
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Errorf("the room's socket as it moved: %v, want a 1012 close", err)
	}
	waitFor(t, 15*time.Second, "probe/mv and room/lobby to be held by b", func() bool {
		return ask(t, "GET", c.url+"/actor/probe/mv/tokens").node == "b" && ask(t, "GET", c.url+"/actor/room/lobby/closes").node == "b"
	})
	ws2, up, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/room/lobby/", nil)
	if err != nil {
		t.Fatalf("reconnecting through a: %v", err)
	}
	if holder := up.Header.Get(peers.NodeHeader); holder != "b" {
		t.Errorf("the room's socket reconnected through a answered by %q, want b", holder)
	}
	ws2.CloseNow()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	r := ask(t, "GET", b.url+"/actor/probe/mv/tokens")
	written := map[string]int{}
	for _, tok := range strings.Fields(r.body) {
		written[tok]++
	}
	for _, tok := range acked {
		if written[tok] != 1 {
			t.Errorf("token %s acknowledged, written %d times in probe/mv: want once", tok, written[tok])
		}
	}
	if r.code != 200 || r.node != "b" || len(acked) == 0 {
		t.Errorf("probe/mv's tokens after the move: %d, from %q, %d acknowledged; want them from b", r.code, r.node, len(acked))
	}
	t.Logf("%d tokens acknowledged; other answers by status: %v", len(acked), others)
	if t.Failed() {
		t.Fatal(logLines([]*bucketNode{a, b, c}, "probe/mv", "6d76", "lease", "lapse", "took"))
	}
	if r := post(t, b.url+"/actor/room/lobby/closes", ""); !strings.Contains(r.body, "1012") {
		t.Errorf("the room's close events: %+v, want its socket's 1012 close run before the move", r)
	}

	// Moves that wait: to a dead node (--force) and to a draining one.
	for _, name := range []string{"stay", "ghostly"} {
		if r := ask(t, "GET", a.url+"/actor/probe/"+name+"/hits"); r.code != 200 || r.node != "a" {
			t.Fatalf("probe/%s through a: %+v, want it taken by a", name, r)
		}
	}
	actorCmd(t, env, bucketURL, 0, []string{`wrote .*control/move/probe/6768`}, "move", "default/default/probe/ghostly", "--to", "ghost", "--force")
	wantCluster(t, wasmkeepBinary(t), env, bucketURL, 0, []string{`wrote control/drain/c`}, "drain", "c")
	waitState(t, env, bucketURL, "c", "drained")
	actorCmd(t, env, bucketURL, 0, []string{`warning: node c is draining|warning: node c is drained`}, "move", "default/default/probe/stay", "--to", "c")
	// A name that was never an actor: its target drops the request.
	actorCmd(t, env, bucketURL, 0, nil, "move", "default/default/probe/nosuch", "--to", "b")
	waitFor(t, 10*time.Second, "b to drop the request for probe/nosuch", func() bool {
		_, err := os.Stat(filepath.Join(dir, "state", "default", "default", "control", "move", "probe", "6e6f73756368", "b"))
		return os.IsNotExist(err) && strings.Contains(b.logs.String(), "no such actor")
	})
	time.Sleep(3 * time.Second) // two passes more
	// A's view may list c taking actors for one more heartbeat after status
	// shows it drained: a move started then finds c refusing the take, and
	// leaves the actor free for its next event (the book's outcome). So
	// probe/stay must only not be on c; probe/ghostly stays on a.
	if r := ask(t, "GET", b.url+"/actor/probe/stay/hits"); r.code != 200 || r.node == "c" || r.node == "" {
		t.Errorf("probe/stay after a move to a draining node: %+v, want it served, not by c", r)
	}
	if r := ask(t, "GET", b.url+"/actor/probe/ghostly/hits"); r.code != 200 || r.node != "a" {
		t.Errorf("probe/ghostly after a move to a dead node: %+v, want it still held by a", r)
	}
	for _, key := range []string{"73746179/c", "67686f73746c79/ghost"} { // stay to c, ghostly to ghost
		if _, err := os.Stat(filepath.Join(dir, "state/default/default/control/move/probe", key)); err != nil {
			t.Errorf("the move request probe/%s: %v, want it kept until it expires", key, err)
		}
	}

	// The alarm fires once, on b, on time.
	time.Sleep(time.Until(time.UnixMilli(due).Add(2500 * time.Millisecond)))
	q := post(t, b.url+"/actor/probe/mv/query", "SELECT at FROM alarm_attempts")
	rows, ok := strings.CutPrefix(q.body, "ok ")
	ran := strings.Split(rows, ",")
	if !ok || len(ran) != 1 || q.node != "b" {
		t.Fatalf("probe/mv's alarm after the move: %+v, want it run once on b", q)
	}
	if v, err := strconv.ParseInt(ran[0], 10, 64); err != nil || v-due > 2000 {
		t.Errorf("probe/mv's alarm ran at %s, due %d: want it within 2 s", ran[0], due)
	}
}

// A parked room (hibernated with its socket open, ADR 1055) moves as a
// resident one does: its socket closes with 1012, its close event runs
// on a (waking it there), b takes it and the request is done. Checked by
// hand: fails with parked records left out of runMoves' holder check
// (the socket stays open, the request waits), and with the acquire
// refused from the move's start rather than once its sockets closed (the
// close event cannot wake the room: it is not run).
func TestActorMoveParked(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	dir := memDir(t)
	bucketURL := "file://" + dir
	a, b := newRoomNode(t, bucketURL, "a"), newRoomNode(t, bucketURL, "b")
	for _, n := range []*bucketNode{a, b} {
		n.env = append(n.env, steadyLease...)
	}
	a.args = append(a.args, "--idle-timeout", "300ms", "--metrics-listen", "127.0.0.1:0")
	startNodes(t, a, b)
	waitState(t, a.env, bucketURL, "b", "serving")
	ws := dialNode(t, a, "/actor/room/home/")
	if got := readText(t, ws); got != "welcome 1" {
		t.Fatalf("the client on a got %q", got)
	}
	metrics := "http://" + metricsAddr(t, a.logs) + "/metrics"
	waitFor(t, 10*time.Second, "the room to park on a", func() bool {
		return metricValue(ask(t, "GET", metrics).body, "wasmkeep_parked_records") == 1
	})
	actorCmd(t, a.env, bucketURL, 0, []string{`control/move/room/686f6d65/b`}, "move", "default/default/room/home", "--to", "b")
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var err error
	for err == nil {
		_, _, err = ws.Read(ctx)
	}
	if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("the parked room's socket as it moved: %v, want a 1012 close", err)
	}
	request := filepath.Join(dir, "state/default/default/control/move/room/686f6d65/b")
	waitFor(t, 10*time.Second, "the move request done", func() bool {
		_, err := os.Stat(request)
		return os.IsNotExist(err)
	})
	if r := post(t, a.url+"/actor/room/home/closes", ""); r.node != "b" || !strings.Contains(r.body, "1012") {
		t.Errorf("the room's close events through a: %+v, want them from b, its socket's 1012 close run before the move", r)
	}
}
