package websocket

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

func testOptions() Options {
	return Options{PerActor: 2, PerNode: 3, PingAfter: time.Hour, PongWait: time.Hour, MaxMessage: 1 << 10, Queue: 2, QueueBytes: 10}
}

func ids(b []byte) []uint64 {
	var out []uint64
	for b = b[4:]; len(b) >= 8; b = b[8:] {
		out = append(out, binary.LittleEndian.Uint64(b))
	}
	return out
}

// The limits per actor and per node count sockets from Reserve to Release;
// an actor's connections are those shown and not closed, oldest first;
// Send queues up to its limits.
func TestHubRegistry(t *testing.T) {
	h := NewHub(context.Background(), clock.Real, testOptions())
	a1, _ := h.Reserve("t/c/a")
	a2, _ := h.Reserve("t/c/a")
	if _, err := h.Reserve("t/c/a"); err != ErrLimit {
		t.Fatalf("a third socket of one actor: %v, want ErrLimit", err)
	}
	b1, _ := h.Reserve("t/c/b")
	if _, err := h.Reserve("t/c/c"); err != ErrLimit {
		t.Fatalf("a fourth socket on the node: %v, want ErrLimit", err)
	}
	if h.Lookup("t/c/a", a1.ID) != a1 || h.Lookup("t/c/b", a1.ID) != nil {
		t.Fatal("Lookup finds a socket only under its own actor")
	}
	h.Show(a2)
	h.Show(a1)
	if got := ids(h.List("t/c/a", nil)); !slices.Equal(got, []uint64{a2.ID, a1.ID}) {
		t.Fatalf("List %v, want shown order", got)
	}
	if r := a1.Send([]byte{byte(abi.MessageText), 'h', 'i'}); r != abi.SendOK {
		t.Fatalf("send: %d", r)
	}
	if r := a1.Send(make([]byte, 9)); r != abi.SendBackpressure {
		t.Fatalf("send past QueueBytes: %d, want backpressure", r)
	}
	if n := h.CloseActor("t/c/a", Normal, "actor deleted"); n != 2 {
		t.Fatalf("CloseActor closed %d, want 2", n)
	}
	if n := h.CloseActor("t/c/a", Normal, "again"); n != 0 || !h.Has("t/c/a") || h.Has("t/c/c") {
		t.Fatalf("CloseActor again counted %d closing sockets (want 0), Has %v, %v", n, h.Has("t/c/a"), h.Has("t/c/c"))
	}
	if got := ids(h.List("t/c/a", nil)); len(got) != 0 {
		t.Fatalf("closed sockets still listed: %v", got)
	}
	if r := a1.Send([]byte{byte(abi.MessageText)}); r != abi.SendUnknownConnection {
		t.Fatalf("send on a closing socket: %d", r)
	}
	h.Release(a1)
	h.Release(b1)
	if h.Len() != 1 {
		t.Fatalf("Len %d after two releases, want 1", h.Len())
	}
	if _, err := h.Reserve("t/c/c"); err != nil {
		t.Fatalf("a released socket still counts: %v", err)
	}
}

type recorder struct {
	h      *Hub
	msgs   chan string
	closed chan int
}

func (r *recorder) Message(s *Socket, msg []byte) {
	r.msgs <- string(msg[1:])
	s.Send(append([]byte{msg[0]}, strings.ToUpper(string(msg[1:]))...))
}

func (r *recorder) Closed(s *Socket, code int, reason string) { r.closed <- code }

// A served socket hands the actor each message and, once the client goes,
// its close with the client's code; what the actor sends reaches the
// client; the socket is then forgotten.
func TestHubServe(t *testing.T) {
	h := NewHub(context.Background(), clock.Real, testOptions())
	rec := &recorder{h: h, msgs: make(chan string, 4), closed: make(chan int, 1)}
	ctx, c := dial(t, func(w http.ResponseWriter, r *http.Request) {
		s, err := h.Reserve("t/c/a")
		if err != nil {
			t.Error(err)
			return
		}
		h.Show(s)
		h.Serve(w, r, s, rec)
	})
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.msgs; got != "hi" {
		t.Fatalf("the actor got %q", got)
	}
	if _, data, err := c.Read(ctx); err != nil || string(data) != "HI" {
		t.Fatalf("the client got %q, %v", data, err)
	}
	c.Close(4000, "bye")
	if code := <-rec.closed; code != 4000 {
		t.Fatalf("close event with %d, want 4000", code)
	}
	waitForgotten(ctx, t, h)
}

// A refused socket is closed with 1008 and the actor's reason, cut to what
// a close frame holds.
func TestHubRefuse(t *testing.T) {
	h := NewHub(context.Background(), clock.Real, testOptions())
	reason := strings.Repeat("é", 100)
	ctx, c := dial(t, func(w http.ResponseWriter, r *http.Request) {
		s, _ := h.Reserve("t/c/a")
		h.Refuse(w, r, s, reason)
	})
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != strings.Repeat("é", 61) {
		t.Fatalf("closed with %v", err)
	}
	waitForgotten(ctx, t, h)
}

// waitForgotten waits for the server's handler to release its socket,
// which it does after the client has seen the close.
func waitForgotten(ctx context.Context, t *testing.T, h *Hub) {
	t.Helper()
	for h.Len() != 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if h.Len() != 0 {
		t.Fatal("the socket is still registered")
	}
}

// dial connects a client over loopback to a server answering with serve.
func dial(t *testing.T, serve http.HandlerFunc) (context.Context, *websocket.Conn) {
	srv := httptest.NewServer(serve)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c
}
