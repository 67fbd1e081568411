package mtlstransport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
)

// How a refused certificate shows at the caller, and the resend that
// follows (book: A caller its peer briefly stopped trusting). Two nodes
// of one app in this process, each a peers.Network over this transport
// on loopback: a, whose view holds b, and b, whose view does not hold a
// yet (it has not listed a's heartbeat), so b refuses a's certificate at
// the handshake. b "lists" a (trusts it) only when the test says so.

// period is the heartbeat period of these tests: the resend waits for
// a's next heartbeat (at most two periods), then two periods more.
const period = 50 * time.Millisecond

type resendPair struct {
	a, b       *peers.Network
	beats      *peers.Heartbeats // a's lease writes
	viewB      *membership.View
	objA       nodelease.Object
	served     atomic.Int64  // requests b's handler ran
	refusedLog chan struct{} // a logged a refusal it will send again after a heartbeat
}

// logWatch is a's log: it signals each "sending once more".
type logWatch struct {
	slog.Handler
	seen chan struct{}
}

func (l logWatch) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "sending once more") {
		l.seen <- struct{}{}
	}
	return nil
}

func (l logWatch) Enabled(context.Context, slog.Level) bool { return true }

func newResendPair(t *testing.T) *resendPair {
	t.Helper()
	trA, err := Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	trB, err := Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trA.Close(); trB.Close() })
	ln, err := trB.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := nodelease.DefaultSettings()
	object := func(pin, clusterAddr string) nodelease.Object {
		return nodelease.Object{State: nodelease.Live, Instance: "i", Seq: 1, WrittenAt: time.Now(),
			Info: nodelease.Info{App: "acme/shop", Advertise: "http://127.0.0.1:1", ClusterAddr: clusterAddr, Pins: []string{pin}}}
	}
	p := &resendPair{beats: peers.NewHeartbeats(), refusedLog: make(chan struct{}, 4),
		viewB: membership.NewView("b", s, clock.Real), objA: object(trA.Pin(), "https://127.0.0.1:2")}
	viewA := membership.NewView("a", s, clock.Real)
	viewA.Update([]membership.Peer{{ID: "b", Object: object(trB.Pin(), "https://"+ln.Addr().String())}})
	p.a = peers.New(peers.Config{Self: "a", App: "acme/shop", View: viewA, Secure: trA, Clock: clock.Real,
		Logger: slog.New(logWatch{seen: p.refusedLog}), Heartbeats: p.beats, Period: period})
	p.b = peers.New(peers.Config{Self: "b", App: "acme/shop", View: p.viewB, Secure: trB, Clock: clock.Real})
	p.a.Refresh()
	p.b.Refresh() // b trusts nobody
	srv := p.b.ClusterServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.served.Add(1)
		if r.Header.Get("Upgrade") == "" {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %s", body)
			return
		}
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		buf.Flush()
		io.Copy(c, buf) // an echo
	}))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); p.a.Close(); p.b.Close() })
	return p
}

// listA is b's heartbeat listing finding a: b trusts a from now.
func (p *resendPair) listA() {
	p.viewB.Update([]membership.Peer{{ID: "a", Object: p.objA}})
	p.b.Refresh()
}

// refused waits until a logged that b refused it and it will send again.
func (p *resendPair) refused(t *testing.T) {
	t.Helper()
	select {
	case <-p.refusedLog:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not report b's refusal within 10 s")
	}
}

// call is a's actors.call to b's actor, its result on the channel.
func (p *resendPair) call(t *testing.T, ctx context.Context) chan string {
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://wasmkeep/actor/c/n/x", bytes.NewReader([]byte("the call")))
		resp, err := p.a.Call(ctx, "b", req)
		if err != nil {
			var f *peers.Failure
			done <- fmt.Sprintf("failed (refused %v): %v", errors.As(err, &f) && f.Refused, err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		done <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	return done
}

func wait(t *testing.T, ch chan string, what string) string {
	t.Helper()
	select {
	case got := <-ch:
		return got
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no end within 20 s", what)
	}
	return ""
}

// A call b refused at the handshake is sent once more after a's next
// heartbeat, which b listed: it runs once. Without that heartbeat landing
// it fails, never read by b, with "refused this node's certificate".
func TestCallResentAfterRefusal(t *testing.T) {
	p := newResendPair(t)
	done := p.call(t, t.Context())
	p.refused(t)
	p.listA()
	p.beats.Wrote(nil)
	if got := wait(t, done, "the call"); got != "200 got the call" || p.served.Load() != 1 {
		t.Fatalf("the call: %q, b ran %d requests; want 200 from one run", got, p.served.Load())
	}

	q := newResendPair(t)
	done = q.call(t, t.Context())
	q.refused(t) // and no heartbeat lands
	if got := wait(t, done, "the call without a heartbeat"); !strings.Contains(got, "failed (refused true)") ||
		!strings.Contains(got, "refused this node's certificate") || q.served.Load() != 0 {
		t.Fatalf("the call without a heartbeat: %q, b ran %d requests; want the refusal, nothing run", got, q.served.Load())
	}
}

// front is a's public port: every request forwarded to b as the front
// door forwards one (no owner hint). ended is told when each ends.
func (p *resendPair) front(t *testing.T) (url string, ended chan int) {
	ended = make(chan int, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := p.a.Forward(w, r, "b", false)
		ended <- status
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ended
}

// upgrade sends a WebSocket-like upgrade to a's front door and returns
// the connection and the answer's status line, read in the background.
func upgrade(t *testing.T, url string) (net.Conn, *bufio.Reader, chan string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "GET /actor/c/n/ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	status := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			status <- err.Error()
			return
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			resp.Body.Close()
		}
		status <- resp.Status
	}()
	return c, br, status
}

// An upgrade b refused at the handshake is relayed once more after a's
// next heartbeat, the client waiting: it gets the 101 and its socket
// works. Without that heartbeat it gets the 503; a client that leaves
// while it waits is dropped, its upgrade never sent again; and a
// forwarded request with a body gets the 503 at once (not kept).
func TestUpgradeResentAfterRefusal(t *testing.T) {
	p := newResendPair(t)
	url, _ := p.front(t)
	c, br, status := upgrade(t, url)
	p.refused(t)
	p.listA()
	p.beats.Wrote(nil)
	if got := wait(t, status, "the upgrade"); got != "101 Switching Protocols" {
		t.Fatalf("the upgrade: %q, want 101", got)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" || p.served.Load() != 1 {
		t.Fatalf("the relayed socket: %q %v, b ran %d upgrades; want the echo of one", buf, err, p.served.Load())
	}

	q := newResendPair(t)
	url, ended := q.front(t)
	_, _, status = upgrade(t, url)
	q.refused(t) // and no heartbeat lands
	if got := wait(t, status, "the upgrade without a heartbeat"); got != "503 Service Unavailable" || q.served.Load() != 0 {
		t.Fatalf("the upgrade without a heartbeat: %q, b ran %d; want 503, nothing run", got, q.served.Load())
	}
	<-ended

	c, _, _ = upgrade(t, url)
	q.refused(t)
	c.Close() // the client leaves during the wait
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the upgrade of a client that left was still waiting 10 s later")
	}
	if n := q.served.Load(); n != 0 {
		t.Fatalf("b ran %d upgrades of a client that left, want none", n)
	}

	r := newResendPair(t)
	url, ended = r.front(t)
	resp, err := http.Post(url+"/x", "text/plain", strings.NewReader("a body"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-ended
	select {
	case <-r.refusedLog:
		t.Fatal("a forwarded request with a body was kept for a resend")
	default:
	}
	if resp.StatusCode != http.StatusServiceUnavailable || r.served.Load() != 0 {
		t.Fatalf("a forwarded POST b refused: %s, b ran %d; want 503 at once", resp.Status, r.served.Load())
	}
}
