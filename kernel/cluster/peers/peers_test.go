package peers

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/transport/plaintext"
)

// peerServer is a node "b" serving h on loopback, in plain text.
type peerServer struct {
	url      string
	requests atomic.Int64
	conns    atomic.Int64
	srv      *http.Server
	handler  atomic.Pointer[http.HandlerFunc]
}

func startPeer(t *testing.T, h http.HandlerFunc) *peerServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerServer{url: "http://" + ln.Addr().String()}
	p.handler.Store(&h)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		(*p.handler.Load())(w, r)
	}), ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}}
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.srv.Close() })
	return p
}

// network is node "a" of app acme/shop whose view holds b, of the same
// app, live at advertise.
func network(t *testing.T, advertise string, answer time.Duration) (*Network, *membership.View, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Now())
	s := nodelease.DefaultSettings()
	view := membership.NewView("a", s, clk)
	view.Update([]membership.Peer{{ID: "b", Object: nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1,
		WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: advertise, App: "acme/shop"}}}})
	tr := plaintext.New()
	t.Cleanup(func() { tr.Close() })
	n := New(Config{Self: "a", App: "acme/shop", View: view, Plain: tr, Clock: clk, AnswerTimeout: answer})
	n.Refresh()
	t.Cleanup(n.Close)
	return n, view, clk
}

func get(t *testing.T, n *Network, method string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://x/actor/c/n", nil)
	return n.Send(context.Background(), "b", req)
}

// Requests reuse a kept-alive connection; one the peer closed while idle
// is replaced before anything is written, so the request costs nothing.
func TestSendReusesAndReplacesConnections(t *testing.T) {
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	n, _, _ := network(t, p.url, 5*time.Second)
	for i := range 3 {
		resp, err := get(t, n, "POST")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d: %q", i, b)
		}
	}
	if c := p.conns.Load(); c != 1 {
		t.Errorf("3 requests opened %d connections, want 1", c)
	}
	p.srv.SetKeepAlivesEnabled(false) // closes the idle connection
	deadline := time.Now().Add(5 * time.Second)
	for {
		n.mu.Lock()
		pl := n.pools["b"]
		n.mu.Unlock()
		pl.mu.Lock()
		idle := len(pl.idle)
		pl.mu.Unlock()
		if idle == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.srv.SetKeepAlivesEnabled(true)
	resp, err := get(t, n, "POST")
	if err != nil {
		t.Fatalf("after the peer closed the idle connection: %v", err)
	}
	resp.Body.Close()
	if got, c := p.requests.Load(), p.conns.Load(); got != 4 || c != 2 {
		t.Errorf("the peer saw %d requests on %d connections, want 4 on 2", got, c)
	}
}

// A request written into a connection that then breaks is never sent
// again, GET included: it may have run there.
func TestSendNeverResends(t *testing.T) {
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := http.NewResponseController(w).Hijack()
		c.Close() // the peer read it, then died before answering
	})
	n, _, _ := network(t, p.url, 5*time.Second)
	for _, m := range []string{"GET", "POST"} {
		_, err := get(t, n, m)
		var f *Failure
		if !errors.As(err, &f) || f.Kind != Broken || !f.Sent() {
			t.Fatalf("%s: %v, want a Broken failure", m, err)
		}
	}
	if got := p.requests.Load(); got != 2 {
		t.Errorf("the peer saw %d requests, want 2: one each, never resent", got)
	}
}

// A written request with no answer in time is NoAnswer; a peer not live is
// NoRoute and one that refuses connections NoConnect, neither sent.
func TestSendFailures(t *testing.T) {
	release := make(chan struct{})
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	n, view, clk := network(t, p.url, 200*time.Millisecond)
	_, err := get(t, n, "GET")
	var f *Failure
	if !errors.As(err, &f) || f.Kind != NoAnswer {
		t.Fatalf("a silent peer: %v, want NoAnswer", err)
	}
	clk.Advance(nodelease.DefaultSettings().Horizon())
	_, err = get(t, n, "GET")
	if !errors.As(err, &f) || f.Kind != NoRoute || f.Sent() {
		t.Fatalf("a peer past its horizon: %v, want NoRoute", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	view.Update([]membership.Peer{{ID: "b", Object: nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 2,
		WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: "http://" + addr, App: "acme/shop"}}}})
	n.Refresh()
	_, err = get(t, n, "GET")
	if !errors.As(err, &f) || f.Kind != NoConnect || f.Sent() {
		t.Fatalf("a refused connection: %v, want NoConnect", err)
	}
}

// A live peer serving another app is never sent to: a call, a forwarded
// request or an upgrade for it has no route, and nothing reaches it.
func TestNoRouteToAnotherApp(t *testing.T) {
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	n, view, clk := network(t, p.url, 5*time.Second)
	view.Update([]membership.Peer{{ID: "b", Object: nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 2,
		WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: p.url, App: "acme/blog"}}}})
	_, err := get(t, n, "POST")
	var f *Failure
	if !errors.As(err, &f) || f.Kind != NoRoute || f.Sent() || !strings.Contains(err.Error(), "node b serves app acme/blog, this node acme/shop") {
		t.Fatalf("a peer of another app: %v, want NoRoute naming both apps", err)
	}
	w := httptest.NewRecorder()
	if _, f := n.Forward(w, httptest.NewRequest("GET", "/actor/c/n", nil), "b", false); f == nil || w.Code != http.StatusServiceUnavailable {
		t.Errorf("forwarding to a peer of another app: %d, want 503", w.Code)
	}
	if got := p.requests.Load(); got != 0 {
		t.Errorf("the other app's node saw %d requests, want none", got)
	}
}

// Forward passes the request on marked forwarded, without the client's
// x-wasmkeep- headers, and answers 503 with Retry-After or 504 without as
// the book says.
func TestForward(t *testing.T) {
	var seen http.Header
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		w.Header().Set(NodeHeader, "b")
		io.WriteString(w, "from b "+r.Host)
	})
	n, _, _ := network(t, p.url, 200*time.Millisecond)
	front := startPeer(t, func(w http.ResponseWriter, r *http.Request) { n.Forward(w, r, "b", false) })
	req, _ := http.NewRequest("POST", front.url+"/actor/c/n", strings.NewReader("body"))
	req.Header.Set("X-Wasmkeep-Caller", "default/forged/x")
	req.Host = "example.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "from b example.test" || resp.Header.Get(NodeHeader) != "b" {
		t.Fatalf("forwarded: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	if seen.Get(ForwardedHeader) != "a" || seen.Get("X-Wasmkeep-Caller") != "" {
		t.Errorf("the holder saw %v", seen)
	}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) })
	p.handler.Store(&slow)
	resp, err = http.Post(front.url+"/actor/c/n", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 504 || resp.Header.Get("Retry-After") != "" {
		t.Errorf("no answer in time: %d, Retry-After %q; want 504 without", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	p.srv.Close()
	resp, err = http.Post(front.url+"/actor/c/n", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a holder that is gone: %d, Retry-After %q; want 503 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// Asked to (a request an owner hint placed), Forward leaves one that
	// failed untouched unanswered, its body unread, for the caller to
	// send elsewhere.
	w := httptest.NewRecorder()
	req = httptest.NewRequest("POST", "/actor/c/n", strings.NewReader("body"))
	_, f := n.Forward(w, req, "b", true)
	if f == nil || !f.Untouched || f.Kind != NoConnect || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("an untouched failure, asked to leave it: %v, answered %d %q", f, w.Code, w.Body)
	}
	if b, _ := io.ReadAll(req.Body); string(b) != "body" {
		t.Errorf("the body after an untouched failure: %q, want it whole", b)
	}

	// A holder that refuses as not held (it released the actor since the
	// hint named it): left unanswered when asked to, nothing of the body
	// read and the holder's heartbeat naming the mark; answered with its
	// 503, without the mark, otherwise.
	p = startPeer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set(NotHeldHeader, "1")
		http.Error(w, "actor c/n is held by node a; retry", http.StatusServiceUnavailable)
	})
	n, view, clk := network(t, p.url, 5*time.Second)
	marks := func(on bool) {
		o := nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 2, WrittenAt: clk.Now(), Info: nodelease.Info{Advertise: p.url, App: "acme/shop"}}
		if on {
			o.Info.Capabilities = []string{nodelease.CapabilityNotHeld}
		}
		view.Update([]membership.Peer{{ID: "b", Object: o}})
		n.Refresh()
	}
	marks(true)
	w = httptest.NewRecorder()
	_, f = n.Forward(w, httptest.NewRequest("GET", "/actor/c/n", nil), "b", true)
	if f == nil || !f.Untouched || f.Kind != NotHeld || f.Kind.String() != "not_held" || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Fatalf("refused as not held, asked to leave it: %v, answered %d %q", f, w.Code, w.Body)
	}
	for name, c := range map[string]struct {
		body        string
		again, mark bool
	}{
		"not asked to leave it":             {"", false, true},
		"its body read":                     {"body", true, true},
		"a peer that does not say it marks": {"", true, false},
	} {
		marks(c.mark)
		w = httptest.NewRecorder()
		req = httptest.NewRequest("POST", "/actor/c/n", strings.NewReader(c.body))
		if status, f := n.Forward(w, req, "b", c.again); f != nil || status != 503 || w.Code != 503 || w.Header().Get(NotHeldHeader) != "" {
			t.Errorf("refused as not held, %s: %v, answered %d %q %v; want the holder's 503 without the mark", name, f, w.Code, w.Body, w.Header())
		}
	}
	if got := p.conns.Load(); got != 1 {
		t.Errorf("the forwards to the refusing holder opened %d connections, want 1 (the refusal read to its end)", got)
	}
}

// An upgrade the holder accepts is joined both ways; once the holder is
// no longer trusted (its lease expired), the relay is cut.
func TestRelayCutWhenPeerDistrusted(t *testing.T) {
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) {
		c, rw, _ := http.NewResponseController(w).Hijack()
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(c, rw) // echo until cut
	})
	n, _, clk := network(t, p.url, 5*time.Second)
	front := startPeer(t, func(w http.ResponseWriter, r *http.Request) { n.Forward(w, r, "b", false) })
	c, err := net.Dial("tcp", strings.TrimPrefix(front.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /actor/c/n HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo: %q %v", line, err)
	}
	clk.Advance(nodelease.DefaultSettings().Horizon())
	n.Refresh()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadString('\n')
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the relay was not cut when its peer stopped being trusted: %v", err)
	}
}

// A forwarded request that asked for a 100 Continue gets the holder's
// final answer, not its 100, and the connection stays in step: the next
// request on it gets its own answer.
func TestForwardSkipsInterimAnswers(t *testing.T) {
	p := startPeer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // the holder's server sends its 100 here
		io.WriteString(w, "got "+string(b))
	})
	n, _, _ := network(t, p.url, 5*time.Second)
	front := startPeer(t, func(w http.ResponseWriter, r *http.Request) { n.Forward(w, r, "b", false) })
	for i, body := range []string{"one", "two"} {
		req, _ := http.NewRequest("POST", front.url+"/actor/c/n", strings.NewReader(body))
		req.Header.Set("Expect", "100-continue")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "got "+body {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, b, "got "+body)
		}
	}
	if c := p.conns.Load(); c != 1 {
		t.Errorf("two requests opened %d connections to the holder, want 1", c)
	}
}
