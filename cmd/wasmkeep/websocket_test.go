package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func room(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/room", "") }

func startRoom(t *testing.T, opts node.Options) *testNode {
	opts.Classes = map[string]string{"room": room(t)}
	return startNode(t, opts)
}

func dial(t *testing.T, tn *testNode, path string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(tn.url, "http")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func readText(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, c *websocket.Conn, text string) {
	t.Helper()
	if err := c.Write(context.Background(), websocket.MessageText, []byte(text)); err != nil {
		t.Fatal(err)
	}
}

// expectClose reads until the socket closes and checks the close frame's
// code and the start of its reason.
func expectClose(t *testing.T, c *websocket.Conn, code websocket.StatusCode, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code || !strings.HasPrefix(ce.Reason, reason) {
			t.Fatalf("closed with %v, want %d %q", err, code, reason)
		}
		return
	}
}

// waitCloses polls the room's record of close events until it holds want.
func waitCloses(t *testing.T, tn *testNode, path, want string) {
	t.Helper()
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, body = tn.do("GET", path, ""); strings.Contains(body, want) {
			return
		}
	}
	t.Fatalf("close events %q, want %q among them", body, want)
}

func TestWebSocketRoomAcrossHibernation(t *testing.T) {
	tn := startRoom(t, node.Options{IdleTimeout: 100 * time.Millisecond})
	a := dial(t, tn, "/actor/room/r1/chat")
	if got := readText(t, a); got != "welcome 1" {
		t.Fatalf("a got %q", got)
	}
	b := dial(t, tn, "/actor/room/r1/chat")
	if got := readText(t, b); got != "welcome 2" { // a's socket was visible to b's open
		t.Fatalf("b got %q", got)
	}
	write(t, a, "hi")
	for _, c := range []*websocket.Conn{a, b} {
		if got := readText(t, c); got != "hi" {
			t.Fatalf("got %q, want hi", got)
		}
	}
	// The room hibernates; its sockets stay, and the next message wakes it.
	waitFor(t, 10*time.Second, "the room to hibernate", func() bool { return tn.metric("wasmkeep_actors_resident") == 0 })
	if n := tn.metric("wasmkeep_websockets_open"); n != 2 {
		t.Fatalf("wasmkeep_websockets_open %v, want 2", n)
	}
	write(t, b, "again")
	for _, c := range []*websocket.Conn{a, b} {
		if got := readText(t, c); got != "again" {
			t.Fatalf("got %q, want again", got)
		}
	}
	write(t, a, "close")
	expectClose(t, a, 4000, "bye")
	b.Close(websocket.StatusNormalClosure, "done")
	waitCloses(t, tn, "/actor/room/r1/", "4000 bye\n")
	waitCloses(t, tn, "/actor/room/r1/", "1000 done\n")
}

func TestWebSocketRefusedAndTooBig(t *testing.T) {
	tn := startRoom(t, node.Options{})
	expectClose(t, dial(t, tn, "/actor/room/r2/refuse?x=1"), websocket.StatusPolicyViolation, "not welcome: /refuse?x=1")

	c := dial(t, tn, "/actor/room/r2/")
	readText(t, c)
	if err := c.Write(context.Background(), websocket.MessageBinary, make([]byte, 1<<20+1)); err != nil {
		t.Fatal(err)
	}
	expectClose(t, c, websocket.StatusMessageTooBig, "")
	waitCloses(t, tn, "/actor/room/r2/", "1009 \n")
}

func TestWebSocketLimitsAndShutdown(t *testing.T) {
	dir := t.TempDir()
	tn := startRoom(t, node.Options{DataDir: dir, WebSocketsPerActor: 2})
	a, b := dial(t, tn, "/actor/room/r3/"), dial(t, tn, "/actor/room/r3/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(tn.url, "http")+"/actor/room/r3/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third socket: %v, %v; want 503", err, resp)
	}
	dial(t, tn, "/actor/room/other/") // the limit is per actor
	tn.stop()
	expectClose(t, a, websocket.StatusServiceRestart, "node stopping")
	expectClose(t, b, websocket.StatusServiceRestart, "node stopping")
	// Their close events ran before the room's database closed.
	tn = startRoom(t, node.Options{DataDir: dir})
	if _, body := tn.do("GET", "/actor/room/r3/", ""); body != "1012 node stopping\n1012 node stopping\n" {
		t.Fatalf("close events %q, want two 1012", body)
	}
}

func TestWebSocketBackpressure(t *testing.T) {
	tn := startRoom(t, node.Options{})
	c := dial(t, tn, "/actor/room/r4/")
	c.SetReadLimit(1 << 20)
	readText(t, c)
	write(t, c, "flood 1000") // 64 MiB at once, against a 4 MiB queue
	// Not reading until the actor has sent it all: its open and this
	// message are its two WebSocket events.
	waitFor(t, 30*time.Second, "the flood to be sent", func() bool {
		return tn.metric(`wasmkeep_events_total{class="room",kind="websocket",outcome="ok"}`) == 2
	})
	for {
		typ, b, err := c.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if typ == websocket.MessageText {
			if string(b) == "refused 0" {
				t.Fatal("no send got backpressure")
			}
			return
		}
	}
}

// WebSocket pings: TestWebSocketPingOnClock (timing_test.go).
