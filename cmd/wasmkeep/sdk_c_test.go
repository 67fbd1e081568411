package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The C SDK against the host, through cmd/wasmkeep/testdata/guests/cprobe:
// every host function and hook, its errors, and the limits.

func cprobe(t testing.TB) string { return buildCGuest(t, "cmd/wasmkeep/testdata/guests/cprobe") }

func startCProbe(t *testing.T, opts node.Options) *testNode {
	opts.Classes = map[string]string{"probe": cprobe(t)}
	return startNode(t, opts)
}

func TestCSDKStorage(t *testing.T) {
	n := startCProbe(t, node.Options{})
	n.expect("GET", "/actor/probe/a/types", "", 200, "k,v,type\n"+
		"blob 4 blob 0.1.2.255.0.\n"+
		"int 1 integer -9223372036854775808\n"+
		"null 0 null null\n"+
		"real 2 real 25\n"+
		"text 3 text h\u00e9llo\n")
	n.expect("GET", "/actor/probe/a/convert", "", 200, "42 0 4275 -3")
	n.expect("GET", "/actor/probe/a/exec?sql="+url.QueryEscape("UPDATE kv SET v = 7 WHERE k IN ('int', 'real')"), "", 200, "changed 2")
	n.expect("GET", "/actor/probe/a/exec-durable?sql="+url.QueryEscape("DELETE FROM kv WHERE k = 'int'"), "", 200, "changed 1")
	n.expect("GET", "/actor/probe/a/count?sql="+url.QueryEscape("SELECT v FROM kv WHERE k = 'real'"), "", 200, "7")
	n.expect("GET", "/actor/probe/a/count?sql="+url.QueryEscape("SELECT v FROM kv WHERE k = 'gone'"), "", 200, "-1")

	// Errors: the source (1 SQL), the kind and the host's message.
	n.expect("GET", "/actor/probe/a/exec?sql="+url.QueryEscape("SELEC 1"), "", 200, `error 1 0: sql syntax: near "SELEC": syntax error`)
	n.expect("GET", "/actor/probe/a/exec?sql="+url.QueryEscape("INSERT INTO kv VALUES ('text', 1)"), "", 200,
		"error 1 1: sql constraint: UNIQUE constraint failed: kv.k")
	n.expectPrefix("GET", "/actor/probe/a/exec?sql="+url.QueryEscape("SELECT 1; SELECT 2"), 200, "error 1 3: sql multiple-statements: ")
	n.expectPrefix("GET", "/actor/probe/a/exec-durable?sql="+url.QueryEscape("BEGIN"), 200, "error 1 5: sql not-allowed: ")

	// Results past the SDK's 8 KiB arena come through take_pending.
	n.expect("GET", "/actor/probe/a/big?n=100000&t="+url.QueryEscape("tail"), "", 200, "100000 tail")
	n.expect("GET", "/actor/probe/a/big?n=3&t="+url.QueryEscape(strings.Repeat("x", 20000)), "", 200, "3 "+strings.Repeat("x", 20000))
	// A host limit is an error like any other: rows past 16 MB.
	n.expectPrefix("GET", "/actor/probe/a/big?n=17000000", 200, "error 1 4: sql quota-exceeded: ")
}

func TestCSDKRequestsAndResponses(t *testing.T) {
	n := startCProbe(t, node.Options{Env: map[string]map[string]string{"probe": {"GREETING": "hello there"}}})
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB: far past the arena
	code, body, hdr := n.doH("POST", "/actor/probe/a/echo", big, http.Header{"X-Probe": {"yes"}})
	if code != 200 || body != big || hdr.Get("X-Probe") != "yes" || hdr.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("echo: %d, %d bytes, headers %v", code, len(body), hdr)
	}
	code, body, hdr = n.doH("GET", "/actor/probe/a/headers", "", nil)
	if code != 201 || body != "" || fmt.Sprint(hdr.Values("X-One")) != "[replaced]" ||
		fmt.Sprint(hdr.Values("Set-Cookie")) != "[a=1 b=2]" || hdr.Get("Content-Type") != "" {
		t.Fatalf("headers: %d %q %v", code, body, hdr)
	}
	n.expect("GET", "/actor/probe/a/a%20b+c?x=1", "", 200, "decoded")
	code, body, hdr = n.doH("GET", "/actor/probe/a/nowhere", "", nil)
	if code != 404 || body != "no such route" || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("404: %d %q %v", code, body, hdr)
	}
	n.expect("GET", "/actor/probe/a/bad-header", "", 500,
		"actor error: wasmkeep: the host refused the response: a header name or value is not valid HTTP\n")
	n.expect("GET", "/actor/probe/a/fail", "", 500, "actor error: deliberately\n")
	n.expect("GET", "/actor/probe/a/fail-sql", "", 500, "actor error: sql syntax: near \"SELEC\": syntax error\n")

	n.expect("GET", "/actor/probe/room%201/self", "", 200, "default/probe/room 1")
	n.expect("GET", "/actor/probe/a/env?name=GREETING", "", 200, "hello there")
	n.expect("GET", "/actor/probe/a/env?name=NOPE", "", 200, "unset")
}

func TestCSDKAlarmsCallsAndFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.RequestURI())
	}))
	defer srv.Close()
	n := startCProbe(t, node.Options{AllowOutbound: loopback})

	n.expect("GET", "/actor/probe/a/alarm-get", "", 200, "none")
	n.expect("GET", "/actor/probe/a/alarm-set?in=60000", "", 200, "set")
	n.expect("GET", "/actor/probe/a/alarm-get?within=60000", "", 200, "soon")
	n.expect("GET", "/actor/probe/a/alarm-clear", "", 200, "cleared")
	n.expect("GET", "/actor/probe/a/alarm-get", "", 200, "none")
	n.expect("GET", "/actor/probe/a/alarm-set?in=0", "", 200, "set")
	waitFor(t, 5*time.Second, "the alarm to fire", func() bool {
		_, body := n.do("GET", "/actor/probe/a/events", "")
		return body == "alarm\n"
	})

	n.expect("GET", "/actor/probe/a/call?to=probe/b&path=/caller", "", 200, "200 default/probe/a")
	n.expect("GET", "/actor/probe/a/call?to=probe/b&path=/echo", "", 200, "200 ping")
	n.expectPrefix("GET", "/actor/probe/a/call?to=probe/a&path=/self", 200, "error 2 1: call reentrant")
	n.expectPrefix("GET", "/actor/probe/a/call?to=nope/x&path=/", 200, "error 2 0: call invalid-address: ")

	n.expect("GET", "/actor/probe/a/fetch?url="+url.QueryEscape(srv.URL+"/x?y=1"), "", 200, "200 hello /x?y=1")
	closed := startCProbe(t, node.Options{})
	closed.expectPrefix("GET", "/actor/probe/a/fetch?url="+url.QueryEscape(srv.URL), 200, "error 3 1: fetch destination-ip-prohibited: ")
	closed.expectPrefix("GET", "/actor/probe/a/fetch?url="+url.QueryEscape("ftp://example.com/"), 200, "error 3 0: fetch invalid-request: ")
}

func TestCSDKWebSockets(t *testing.T) {
	n := startCProbe(t, node.Options{})
	a := dial(t, n, "/actor/probe/w/ws")
	write(t, a, "hello")
	if got := readText(t, a); got != "hello" {
		t.Fatalf("echo: %q", got)
	}
	if err := a.Write(context.Background(), websocket.MessageBinary, []byte{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if kind, b, err := a.Read(ctx); err != nil || kind != websocket.MessageBinary || string(b) != "\x00\x01\x02" {
		t.Fatalf("binary echo: %v %q %v", kind, b, err)
	}
	b := dial(t, n, "/actor/probe/w/ws")
	write(t, b, "count")
	if got := readText(t, b); got != "2 other me" {
		t.Fatalf("connections: %q", got)
	}
	write(t, b, "stranger")
	if got := readText(t, b); got != "websocket: unknown connection" {
		t.Fatalf("send to another connection: %q", got)
	}
	expectClose(t, dial(t, n, "/actor/probe/w/refuse?x=1"), websocket.StatusPolicyViolation, "not welcome: /refuse?x=1")
	write(t, a, "close")
	expectClose(t, a, 4000, "bye")
	b.Close(websocket.StatusNormalClosure, "done")
	waitFor(t, 5*time.Second, "the close events", func() bool {
		_, body := n.do("GET", "/actor/probe/w/events", "")
		return strings.Contains(body, "close 4000 bye\n") && strings.Contains(body, "close 1000 done\n")
	})
}

func TestCSDKDeleteSelf(t *testing.T) {
	n := startCProbe(t, node.Options{})
	n.expect("GET", "/actor/probe/a/types", "", 200, n.body("GET", "/actor/probe/b/types"))
	n.expect("GET", "/actor/probe/a/delete", "", 200, "deleted at the end")
	n.expect("GET", "/actor/probe/a/count?sql="+url.QueryEscape("SELECT count(*) FROM kv"), "", 200, "0")
	n.expectPrefix("GET", "/actor/probe/b/delete-durable", 200, "error 1 5: sql not-allowed: ")
	n.expect("GET", "/actor/probe/b/count?sql="+url.QueryEscape("SELECT count(*) FROM kv"), "", 200, "0")
}

// A guest past a limit fails its event and the next one gets a fresh
// instance; memory the host refuses is an error the guest can handle.
func TestCSDKLimits(t *testing.T) {
	// The default budget: growing 16 MiB in an event fits it (ADR 1043).
	n := startCProbe(t, node.Options{CPUBudget: 50 * time.Millisecond})
	// An actor's ordinary events stay in its first 64 KiB page.
	n.body("GET", "/actor/probe/small/types")
	n.body("POST", "/actor/probe/small/echo")
	n.expect("GET", "/actor/probe/small/memory", "", 200, "1")

	for _, path := range []string{"/trap", "/recurse", "/spin"} {
		if code, _ := n.do("GET", "/actor/probe/a"+path, ""); code != 500 {
			t.Errorf("%s: %d, want 500", path, code)
		}
		n.expect("GET", "/actor/probe/a/self", "", 200, "default/probe/a")
	}
	n.expect("GET", "/actor/probe/a/alloc?mb=200", "", 200, "error 5 0: out of memory") // the host caps memory at 128 MiB
	n.expect("GET", "/actor/probe/a/alloc?mb=16", "", 200, "allocated")
}

// body sends a request that must succeed and returns its body.
func (tn *testNode) body(method, path string) string {
	tn.t.Helper()
	code, body := tn.do(method, path, "")
	if code != 200 {
		tn.t.Fatalf("%s %s: %d %q", method, path, code, body)
	}
	return body
}

// expectPrefix checks a request's status and the start of its body, which
// goes on with a message of the host's.
func (tn *testNode) expectPrefix(method, path string, wantCode int, prefix string) string {
	tn.t.Helper()
	code, body := tn.do(method, path, "")
	if code != wantCode || !strings.HasPrefix(body, prefix) || len(body) == len(prefix) {
		tn.t.Fatalf("%s %s: got %d %q, want %d and %q then a message", method, path, code, body, wantCode, prefix)
	}
	return body
}

// fakeHost is the wasmkeep host module played by the test, so that the C
// SDK can be given what a correct host never sends: malformed payloads and
// a pending payload of the wrong size.
type fakeHost struct {
	pending   []byte
	short     bool   // take_pending announces one byte less than it copies
	rows      []byte // what sql_query answers
	response  []byte
	hookError string
}

// reply answers a host call: the payload in the guest's buffer if it fits,
// else pending.
func (h *fakeHost) reply(m api.Module, payload []byte, out, cap uint32) int32 {
	if uint32(len(payload)) <= cap {
		m.Memory().Write(out, payload)
	} else {
		h.pending = payload
	}
	return int32(len(payload))
}

func (h *fakeHost) instantiate(t *testing.T, ctx context.Context, r wazero.Runtime) {
	b := r.NewHostModuleBuilder("wasmkeep")
	fn := func(name string, f any) { b.NewFunctionBuilder().WithFunc(f).Export(name) }
	fn("take_pending", func(_ context.Context, m api.Module, ptr uint32) int32 {
		if h.pending == nil {
			return -1
		}
		p := h.pending
		h.pending = nil
		m.Memory().Write(ptr, p)
		if h.short {
			return int32(len(p) - 1)
		}
		return int32(len(p))
	})
	fn("hook_error", func(_ context.Context, m api.Module, ptr, n uint32) {
		b, _ := m.Memory().Read(ptr, n)
		h.hookError = string(b)
	})
	fn("respond", func(_ context.Context, m api.Module, ptr, n uint32) int32 {
		b, _ := m.Memory().Read(ptr, n)
		h.response = append([]byte(nil), b...)
		return 0
	})
	fn("sql_exec", func(_ context.Context, m api.Module, _, _, _, _, _, out, cap uint32) int32 {
		return h.reply(m, abi.AppendU64(nil, 1), out, cap)
	})
	fn("sql_query", func(_ context.Context, m api.Module, _, _, _, _, out, cap uint32) int32 {
		return h.reply(m, h.rows, out, cap)
	})
	// The rest of the ABI, which these cases do not reach.
	fn("delete_self", func(uint32, uint32, uint32) int32 { return 0 })
	fn("alarm_set", func(int64) {})
	fn("alarm_get", func() int64 { return -1 })
	fn("alarm_clear", func() {})
	fn("actor_call", func(_, _, _, _, _, _ uint32) int32 { return 0 })
	fn("http_fetch", func(_, _, _, _ uint32) int32 { return 0 })
	fn("self_address", func(_, _ uint32) int32 { return 0 })
	fn("ws_send", func(uint64, uint32, uint32, uint32) int32 { return 0 })
	fn("ws_close", func(uint64, uint32, uint32, uint32) {})
	fn("ws_connections", func(_, _ uint32) int32 { return 0 })
	fn("env_get", func(_, _, _, _ uint32) int32 { return -1 })
	if _, err := b.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
}

// request runs wasmkeep_on_request on GET target and returns the response
// body, or the hook's error.
func (h *fakeHost) request(t *testing.T, ctx context.Context, mod api.Module, target string) string {
	t.Helper()
	return h.run(t, ctx, mod, abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: target}))
}

func (h *fakeHost) run(t *testing.T, ctx context.Context, mod api.Module, payload []byte) string {
	t.Helper()
	h.pending, h.response, h.hookError = payload, nil, ""
	res, err := mod.ExportedFunction("wasmkeep_on_request").Call(ctx, uint64(len(payload)))
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != 0 {
		return "hook error: " + h.hookError
	}
	resp, err := abi.DecodeResponse(h.response)
	if err != nil {
		t.Fatal(err)
	}
	return string(resp.Body)
}

func TestCSDKMalformedHostPayloads(t *testing.T) {
	wasm, err := os.ReadFile(cprobe(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	h := &fakeHost{}
	h.instantiate(t, ctx, r)
	mod, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		t.Fatal(err)
	}

	rows := func(columns []string, vals ...abi.Value) []byte {
		w := abi.RowsWriter{}
		w.Begin(columns)
		w.Row(vals)
		return w.Buf
	}
	h.rows = rows([]string{"n"}, abi.Value{Kind: abi.KindInteger, Int: 7})
	if got := h.request(t, ctx, mod, "/count?sql=x"); got != "7" {
		t.Fatalf("well-formed rows: %q", got)
	}
	// Each event's memory is released: a thousand events later the instance
	// is still in its first page.
	h.rows = rows([]string{"n"}, abi.Value{Kind: abi.KindText, Bytes: make([]byte, 3000)})
	for range 1000 {
		h.request(t, ctx, mod, "/count?sql=x")
	}
	if size := mod.Memory().Size(); size != 65536 {
		t.Errorf("linear memory %d bytes after 1,000 events, want one page", size)
	}

	h.rows = rows([]string{"b", "t"}, abi.Value{Kind: abi.KindBlob, Bytes: make([]byte, 100000)}, abi.Value{Kind: abi.KindText, Bytes: []byte("x")})
	if got := h.request(t, ctx, mod, "/big?n=1"); got != "100000 x" {
		t.Fatalf("pending rows: %q", got)
	}
	const malformed = "error 6 0: wasmkeep: malformed rows from the host"
	for name, payload := range map[string][]byte{
		"a column count past the payload": abi.AppendU32(nil, 1000),
		"a row count past the payload":    append(rows([]string{"n"}, abi.Value{})[:9], 0xff, 0xff, 0xff, 0xff),
		"an unknown value kind":           append(rows([]string{"n"})[:13], 9),
		"trailing bytes":                  append(rows([]string{"n"}, abi.Value{}), 0),
	} {
		h.rows = payload
		if got := h.request(t, ctx, mod, "/count?sql=x"); got != malformed {
			t.Errorf("%s: %q", name, got)
		}
	}
	h.rows, h.short = rows([]string{"n"}, abi.Value{Kind: abi.KindBlob, Bytes: make([]byte, 100000)}), true
	if got := h.request(t, ctx, mod, "/count?sql=x"); got != "hook error: wasmkeep: the pending payload is missing or not the announced size" {
		t.Errorf("a pending payload of the wrong size: %q", got)
	}
	h.short = false
	req := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/self"})
	if got := h.run(t, ctx, mod, req[:len(req)-2]); got != "hook error: wasmkeep: malformed request from the host" {
		t.Errorf("a truncated request: %q", got)
	}
}
