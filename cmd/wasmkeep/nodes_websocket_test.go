package main

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Relayed WebSockets between real nodes (issue 15, item 5 and Tests;
// book: Running a cluster, WebSockets): a client connected through a node
// that does not hold the room is relayed to the holder over the mutual TLS
// cluster listener and shares the room with the holder's own clients; a
// clean stop of the holder closes every socket with 1012, relayed ones
// included; a fenced holder's relayed sockets are cut by the relaying
// node.

// newRoomNode is node id of the cluster on bucketURL serving the room
// guest (shortLease: a cluster listener of its own); not started.
func newRoomNode(t *testing.T, bucketURL, id string) *bucketNode {
	n := newBucketNode(t, bucketURL, nil)
	n.args = []string{"--actor", "room=" + room(t), "--bucket", bucketURL, "--node-id", id}
	return n
}

// dialNode opens a WebSocket on n at path.
func dialNode(t *testing.T, n *bucketNode, path string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.url, "http")+path, nil)
	if err != nil {
		t.Fatalf("a WebSocket on %s: %v (%v)\n%s", n.url+path, err, resp, n.logs)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// ended reads c until it ends and sends how, within 30 s (a timeout then,
// which no check accepts).
func ended(c *websocket.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			if _, _, err := c.Read(ctx); err != nil {
				if ctx.Err() != nil {
					err = errors.New("still open after 30 s")
				}
				done <- err
				return
			}
		}
	}()
	return done
}

// chat checks that a message from each client reaches both.
func chat(t *testing.T, clients map[string]*websocket.Conn) {
	t.Helper()
	for from, c := range clients {
		write(t, c, "from "+from)
		for to, d := range clients {
			if got := readText(t, d); got != "from "+from {
				t.Fatalf("%s got %q, want the message from %s", to, got, from)
			}
		}
	}
}

func TestRelayedWebSockets(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bucketURL := "file://" + memDir(t)
	a, b, c := newRoomNode(t, bucketURL, "a"), newRoomNode(t, bucketURL, "b"), newRoomNode(t, bucketURL, "c")
	for _, n := range []*bucketNode{a, b, c} {
		n.start()
	}

	// r0 is held by c, with a client relayed through a: a's clean stop
	// below must end it too (a relays it, holds nothing of it), and c's
	// room must see it close.
	readText(t, dialNode(t, c, "/actor/room/r0/"))
	viaA := dialNode(t, a, "/actor/room/r0/")
	if got := readText(t, viaA); got != "welcome 2" {
		t.Fatalf("the client relayed through a got %q, want welcome 2: the room on c", got)
	}

	// r1 is held by a: one client on a, one relayed through b.
	onA := dialNode(t, a, "/actor/room/r1/")
	if got := readText(t, onA); got != "welcome 1" {
		t.Fatalf("the client on a got %q", got)
	}
	viaB := dialNode(t, b, "/actor/room/r1/")
	if got := readText(t, viaB); got != "welcome 2" {
		t.Fatalf("the client relayed through b got %q, want welcome 2: the room on a", got)
	}
	chat(t, map[string]*websocket.Conn{"a's client": onA, "b's client": viaB})

	// a stops cleanly: both its sockets get 1012, the relayed one through
	// b (or, if b cut it first, seeing a released, its connection ends).
	endA, endB, endRelayed := ended(onA), ended(viaB), ended(viaA)
	a.stop()
	if err := <-endRelayed; strings.Contains(err.Error(), "still open") {
		t.Fatalf("the client a relayed to c, after a's clean stop: %v, want it ended", err)
	} else {
		t.Logf("the client a relayed to c, after a's clean stop: %v", err)
	}
	var closes reply
	waitFor(t, 10*time.Second, "r0 on c to see the relayed socket close", func() bool {
		closes = ask(t, "GET", c.url+"/actor/room/r0/")
		return closes.body != ""
	})
	t.Logf("r0's close events: %q", closes.body)
	var ce websocket.CloseError
	if err := <-endA; !errors.As(err, &ce) || ce.Code != websocket.StatusServiceRestart {
		t.Fatalf("the client on a after a's clean stop: %v, want 1012", err)
	}
	switch err := <-endB; {
	case errors.As(err, &ce) && ce.Code == websocket.StatusServiceRestart:
	case errors.As(err, &ce), strings.Contains(err.Error(), "still open"):
		t.Fatalf("the client relayed to a after a's clean stop: %v, want 1012 or its connection's end", err)
	default:
		t.Logf("the client relayed to a after a's clean stop: its connection ended (%v)", err)
	}
	// a released r1: b takes it at once.
	if got := readText(t, dialNode(t, b, "/actor/room/r1/")); got != "welcome 1" {
		t.Fatalf("r1 through b after a's clean stop: %q, want welcome 1", got)
	}

	// r2 is held by c: one client on c, one relayed through b. c is then
	// frozen (SIGSTOP: it closes nothing, answers nothing) and fenced: b
	// stops trusting it and cuts the relayed socket, which nothing else
	// would end.
	onC := dialNode(t, c, "/actor/room/r2/")
	readText(t, onC)
	viaB = dialNode(t, b, "/actor/room/r2/")
	if got := readText(t, viaB); got != "welcome 2" {
		t.Fatalf("the client relayed through b got %q, want welcome 2: the room on c", got)
	}
	chat(t, map[string]*websocket.Conn{"c's client": onC, "b's client": viaB})
	endB = ended(viaB)
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer c.cmd.Process.Signal(syscall.SIGCONT)
	wantCluster(t, b.bin, b.env, bucketURL, 0, []string{`fenced node c `}, "fence", "c")
	fenced := time.Now()
	if err := <-endB; errors.As(err, &ce) || strings.Contains(err.Error(), "still open") {
		t.Fatalf("the client relayed to the fenced node c: %v, want its connection cut by b\nb:\n%s", err, b.logs)
	} else {
		t.Logf("the client relayed to the fenced node c: cut %v after the fence (%v)", time.Since(fenced), err)
	}
	b.stop()
}
