package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// Under existing, delete-self and delete-self-durable close the actor's
// sockets with 1000 when the event ends, and a message racing the delete
// (sent right behind it) does not create the actor again: the next outside
// request and upgrade get 404 (book ADR 0028; issue 12, item 8).
func TestDeleteClosesSocketsUnderExisting(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, node.Options{DataDir: dir,
		Classes: map[string]string{"front": hostcall(t), "room": hostcall(t)},
		Access:  map[string]access.Access{"room": mustAccess(t, "existing")}})
	db := filepath.Join(dir, "state", "default", "default", "actors", "default", "room", "r.db")
	for _, how := range []string{"delete", "delete-durable"} {
		n.expect("POST", "/actor/front/x/create?to=room/r", "", 200, "200") // an inside call may create it
		a, b := dial(t, n, "/actor/room/r/ws"), dial(t, n, "/actor/room/r/ws")
		write(t, a, "hello")
		if got := readText(t, a); got != "hello" {
			t.Fatalf("%s: echo %q", how, got)
		}
		write(t, a, how)
		write(t, a, "racing the delete")
		expectClose(t, a, websocket.StatusNormalClosure, "actor deleted")
		expectClose(t, b, websocket.StatusNormalClosure, "actor deleted")
		n.expect("GET", "/actor/room/r/rows", "", 404, "unknown actor \"r\"\n")
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%s: the database is there again (%v)", how, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, resp, err := websocket.Dial(ctx, "ws"+n.url[len("http"):]+"/actor/room/r/ws", nil)
		cancel()
		if err == nil || resp == nil || resp.StatusCode != 404 {
			t.Errorf("%s: upgrade after the delete: %v, want 404", how, err)
		}
	}
}

// An open class keeps its sockets on delete, as the book says: the next
// message creates the actor anew, as any outside request may.
func TestDeleteKeepsSocketsUnderOpen(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"room": hostcall(t)}})
	for _, how := range []string{"delete", "delete-durable"} {
		c := dial(t, n, "/actor/room/"+how+"/ws")
		write(t, c, how)
		write(t, c, "after "+how)
		if got := readText(t, c); got != "after "+how {
			t.Fatalf("%s: echo %q", how, got)
		}
		n.expect("GET", "/actor/room/"+how+"/rows", "", 200, "1 0") // the new actor's one message
		c.Close(websocket.StatusNormalClosure, "")
	}
}
