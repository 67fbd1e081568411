package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The node-wide socket limit holds across actors: past it, an upgrade to any
// actor gets 503; once a socket closes, a new one is accepted.
func TestWebSocketNodeLimit(t *testing.T) {
	tn := startRoom(t, node.Options{WebSocketsPerNode: 2})
	a := dial(t, tn, "/actor/room/one/")
	dial(t, tn, "/actor/room/two/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(tn.url, "http")+"/actor/room/three/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third socket on the node: %v, %v; want 503", err, resp)
	}
	a.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 10*time.Second, "a free socket slot", func() bool {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(tn.url, "http")+"/actor/room/three/", nil)
		if err != nil {
			return false
		}
		c.CloseNow()
		return true
	})
}
