package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The chat-room example: broadcast, history for newcomers, leaves
// announced, and the room's sockets kept across its hibernation.
func TestChatRoomExample(t *testing.T) {
	n := startNode(t, node.Options{
		Classes:     map[string]string{"chat": buildGuest(t, "examples/chat-room", "")},
		IdleTimeout: 300 * time.Millisecond,
	})
	alice := dial(t, n, "/actor/chat/lobby")
	bob := dial(t, n, "/actor/chat/lobby")
	expectLine := func(c *websocket.Conn, suffix string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, b, err := c.Read(ctx)
		if err != nil || !strings.HasSuffix(string(b), suffix) {
			t.Fatalf("got %q, %v; want a line ending in %q\nnode log:\n%s", b, err, suffix, n.log.String())
		}
	}
	write(t, alice, "hi")
	expectLine(alice, ": hi")
	expectLine(bob, ": hi")

	time.Sleep(900 * time.Millisecond) // the room hibernates; its sockets stay
	write(t, bob, "still here")
	expectLine(alice, ": still here")
	expectLine(bob, ": still here")

	alice.Close(websocket.StatusNormalClosure, "")
	expectLine(bob, " left")

	carol := dial(t, n, "/actor/chat/lobby")
	for _, want := range []string{": hi", ": still here", " left"} {
		expectLine(carol, want)
	}
	code, history := n.do("GET", "/actor/chat/lobby", "")
	if code != 200 || strings.Count(history, "\n") != 3 {
		t.Errorf("history: %d %q", code, history)
	}
}
