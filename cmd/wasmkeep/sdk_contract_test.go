package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The contracts every SDK's examples pass, as the book's languages tests: the
// same requests, the same answers, whatever language the actor is written
// in. A new SDK adds its examples to these tables.

// sdkGuest is one SDK's build of an example.
type sdkGuest struct {
	sdk   string
	build func(testing.TB) string
}

func counterGuests() []sdkGuest {
	return []sdkGuest{
		{"go", counter},
		{"c", func(t testing.TB) string { return buildCGuest(t, "examples/c/counter") }},
	}
}

func chatGuests() []sdkGuest {
	return []sdkGuest{
		{"go", func(t testing.TB) string { return buildGuest(t, "examples/chat-room", "") }},
		{"c", func(t testing.TB) string { return buildCGuest(t, "examples/c/chat-room") }},
	}
}

func rateLimiterGuests() []sdkGuest {
	return []sdkGuest{
		{"go", func(t testing.TB) string { return buildGuest(t, "examples/rate-limiter", "") }},
		{"c", func(t testing.TB) string { return buildCGuest(t, "examples/c/rate-limiter") }},
	}
}

// The counter: created by its first request, incremented (plainly and
// durably), its value kept across hibernation and across a restart of the
// node.
func TestCounterContract(t *testing.T) {
	for _, g := range counterGuests() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			opts := node.Options{
				DataDir:     t.TempDir(),
				Classes:     map[string]string{"counter": g.build(t)},
				IdleTimeout: 200 * time.Millisecond,
			}
			n := startNode(t, opts)
			n.expect("GET", "/actor/counter/alice", "", 200, "0\n")
			n.expect("POST", "/actor/counter/alice", "", 200, "1\n")
			code, body, hdr := n.doH("POST", "/actor/counter/alice", "", nil)
			if code != 200 || body != "2\n" || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("POST: %d %q, Content-Type %q", code, body, hdr.Get("Content-Type"))
			}
			n.expect("POST", "/actor/counter/bob", "", 200, "1\n") // actors are independent
			n.expect("POST", "/actor/counter/bob/durable", "", 200, "2\n")
			code, body, hdr = n.doH("PUT", "/actor/counter/alice", "", nil)
			if code != 405 || body != "method not allowed\n" || hdr.Get("Allow") != "GET, POST" {
				t.Fatalf("PUT: %d %q, Allow %q", code, body, hdr.Get("Allow"))
			}

			waitFor(t, 5*time.Second, "the counters to hibernate", func() bool { return n.metric("wasmkeep_actors_resident") == 0 })
			n.expect("GET", "/actor/counter/alice", "", 200, "2\n")
			n.expect("POST", "/actor/counter/alice", "", 200, "3\n")

			n.stop()
			n = startNode(t, opts)
			n.expect("GET", "/actor/counter/alice", "", 200, "3\n")
			n.expect("POST", "/actor/counter/bob", "", 200, "3\n")
		})
	}
}

// The chat room: broadcast, history for newcomers, leaves announced, and the
// room's sockets kept across its hibernation.
func TestChatContract(t *testing.T) {
	for _, g := range chatGuests() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			n := startNode(t, node.Options{
				Classes:     map[string]string{"chat": g.build(t)},
				IdleTimeout: 300 * time.Millisecond,
			})
			alice := dial(t, n, "/actor/chat/lobby")
			bob := dial(t, n, "/actor/chat/lobby")
			expectLine := func(c *websocket.Conn, suffix string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, b, err := c.Read(ctx)
				if err != nil || !strings.HasPrefix(string(b), "#") || !strings.HasSuffix(string(b), suffix) {
					t.Fatalf("got %q, %v; want a line ending in %q\nnode log:\n%s", b, err, suffix, n.log.String())
				}
			}
			write(t, alice, "  hi\n")
			expectLine(alice, ": hi")
			expectLine(bob, ": hi")

			waitFor(t, 5*time.Second, "the room to hibernate", func() bool { return n.metric("wasmkeep_actors_resident") == 0 })
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
			lines := strings.Split(strings.TrimSuffix(history, "\n"), "\n")
			if code != 200 || len(lines) != 3 || !strings.HasSuffix(lines[0], ": hi") || !strings.HasSuffix(lines[2], " left") {
				t.Errorf("history: %d %q", code, history)
			}
		})
	}
}

// The rate limiter: a window of LIMIT requests, closed by an alarm; a key
// idle for a whole window deletes itself; a bad LIMIT is named.
func TestRateLimiterContract(t *testing.T) {
	for _, g := range rateLimiterGuests() {
		t.Run(g.sdk, func(t *testing.T) {
			t.Parallel()
			rateLimiterContract(t, g.build(t))
		})
	}
}

func rateLimiterContract(t *testing.T, guest string) {
	data := t.TempDir()
	n := startNode(t, node.Options{
		DataDir: data,
		Classes: map[string]string{"limit": guest, "bad": guest},
		Env: map[string]map[string]string{
			"limit": {"LIMIT": "3", "WINDOW_MS": "500"},
			"bad":   {"LIMIT": "3x"},
		},
	})
	n.expect("POST", "/actor/bad/key", "", 500, "LIMIT must be a positive integer\n")
	code, body, hdr := n.doH("PUT", "/actor/limit/key", "", nil)
	if code != 405 || body != "method not allowed\n" || hdr.Get("Allow") != "GET, POST" {
		t.Fatalf("PUT: %d %q, Allow %q", code, body, hdr.Get("Allow"))
	}
	db := filepath.Join(data, "state", "default", "default", "actors", "default", "limit", "key.db")

	for _, want := range []string{"2\n", "1\n", "0\n"} {
		n.expect("POST", "/actor/limit/key", "", 200, want)
	}
	code, body, hdr = n.doH("POST", "/actor/limit/key", "", nil)
	if code != 429 || body != "rate limit exceeded\n" || hdr.Get("Retry-After") != "1" {
		t.Fatalf("over the limit: %d %q, Retry-After %q", code, body, hdr.Get("Retry-After"))
	}
	n.expect("GET", "/actor/limit/other", "", 200, "3\n") // keys are independent

	// The alarm closes the window: the key has its full quota again.
	waitFor(t, 5*time.Second, "the window to close", func() bool {
		code, body := n.do("GET", "/actor/limit/key", "")
		return code == 200 && body == "3\n"
	})
	n.expect("POST", "/actor/limit/key", "", 200, "2\n")

	// Then a window without requests: the key deletes itself, and so does
	// one that only ever asked.
	waitFor(t, 5*time.Second, "the idle key to delete itself", func() bool { return missing(db) })
	waitFor(t, 5*time.Second, "the unused key to delete itself", func() bool {
		return missing(filepath.Join(data, "state", "default", "default", "actors", "default", "limit", "other.db"))
	})
	n.expect("POST", "/actor/limit/key", "", 200, "2\n")
}
