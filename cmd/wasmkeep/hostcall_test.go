package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// hostcall is a C guest that passes host functions ranges outside its
// memory, which the SDKs never do.
func hostcall(t testing.TB) string {
	return buildCGuest(t, "cmd/wasmkeep/testdata/guests/hostcall")
}

// A host call whose buffer reaches outside the guest's memory traps (500)
// and leaves nothing behind: the check comes before the call acts, and it
// covers the whole output range, even where the payload would fit
// (docs/abi.md, section 3; issue 12, item 4).
func TestHostCallOutsideMemoryLeavesNothing(t *testing.T) {
	var fetched atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		fmt.Fprint(w, "fetched")
	}))
	defer srv.Close()
	dir := t.TempDir()
	n := startNode(t, node.Options{DataDir: dir, AllowOutbound: loopback,
		Classes: map[string]string{"probe": hostcall(t)},
		Env:     map[string]map[string]string{"probe": {"GREETING": "hi"}}})
	n.expect("POST", "/actor/probe/callee/put", "", 200, "")

	// off is where the buffer starts, in bytes before the end of memory:
	// 8 leaves room for sql_exec's 8-byte answer but not for the buffer's
	// 64 bytes; -65536 starts a page past the end, with no room asked for.
	ranges := []struct{ off, cap int }{{8, 64}, {4, 64}, {-65536, 0}}
	fns := []string{"sql_exec", "sql_exec_durable", "sql_query", "delete_self", "delete_self_durable",
		"self_address", "env_get", "ws_connections", "actor_call", "http_fetch",
		"take_pending", "respond", "hook_error"}
	for _, fn := range fns { // each on an actor of its own, named after it
		n.expect("POST", "/actor/probe/"+fn+"/put", "", 200, "")
		for _, r := range ranges {
			path := fmt.Sprintf("/actor/probe/%s/bad?fn=%s&off=%d&cap=%d&to=probe/callee&url=%s",
				fn, fn, r.off, r.cap, url.QueryEscape(srv.URL+"/x"))
			if code, body := n.do("POST", path, ""); code != 500 || body != "actor failed\n" {
				t.Errorf("%s, buffer %d bytes before the end, %d long: %d %q, want the trap's 500", fn, r.off, r.cap, code, body)
			}
		}
		// Nothing happened: no row written, no delete.
		if _, rows := n.do("GET", "/actor/probe/"+fn+"/rows", ""); rows != "1 0" {
			t.Errorf("%s: rows (all, bad) %q, want the one put before: \"1 0\"", fn, rows)
		}
		if _, err := os.Stat(filepath.Join(dir, "state", "default", "default", "actors", "default", "probe", fn+".db")); err != nil {
			t.Errorf("%s: the database is gone: %v", fn, err)
		}
	}
	// No call, no request.
	if _, rows := n.do("GET", "/actor/probe/callee/rows", ""); rows != "1 0" {
		t.Errorf("the callee has rows %q, want the one put before: \"1 0\"", rows)
	}
	if got := fetched.Load(); got != 0 {
		t.Errorf("the loopback server got %d requests, want none", got)
	}
	// The same call with a good buffer does act (the test can see it act).
	n.expect("POST", "/actor/probe/a/bad?fn=sql_exec&off=100&cap=64", "", 200, "returned 8")
	n.expect("GET", "/actor/probe/a/rows", "", 200, "1 1")
}

// ws_send and ws_close read their data before they act: a range outside
// memory traps, and the socket neither gets the message nor closes.
func TestWebSocketCallOutsideMemoryLeavesNothing(t *testing.T) {
	n := startNode(t, node.Options{Classes: map[string]string{"probe": hostcall(t)}})
	c := dial(t, n, "/actor/probe/a/ws")
	write(t, c, "bad-send")
	write(t, c, "bad-close")
	write(t, c, "still open")
	if got := readText(t, c); got != "still open" {
		t.Fatalf("first message %q, want the echo of the last one", got)
	}
	n.expect("GET", "/actor/probe/a/rows", "", 200, "2 0") // open and the echoed message
	if !strings.Contains(n.log.String(), "outside the guest's memory") {
		t.Errorf("no trap logged:\n%s", n.log.String())
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// A trap after delete-self in the same event does not undo the delete: the
// delete is carried out when the event ends, however it ends, as statements
// the event committed are kept; delete-self-durable was done inside its
// call. Only a transaction left open is rolled back (docs/abi.md, section 3).
func TestDeleteSelfThenTrap(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"probe": hostcall(t)}})
	db := filepath.Join(dir, "state", "default", "default", "actors", "default", "probe", "a.db")
	for _, route := range []string{"delete-then-trap", "delete-durable-then-trap"} {
		n.expect("POST", "/actor/probe/a/put", "", 200, "")
		n.expect("POST", "/actor/probe/a/"+route, "", 500, "actor failed\n")
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%s: the database is still there (%v)", route, err)
		}
		n.expect("GET", "/actor/probe/a/rows", "", 200, "0 0")
	}
}
