package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// newManualNode starts a node serving the probe and room guests on a
// manual clock reading the wall clock's time once the node is up (the
// guests read the wall clock: alarms they set "in 1000 ms" are then 1000 ms
// ahead of the manual clock, give or take the few milliseconds the test
// takes).
func newManualNode(t *testing.T, opts node.Options) (*testNode, *clock.Manual) {
	t.Helper()
	start := time.Now()
	m := clock.NewManual(start)
	opts.Clock = m
	opts.Classes = map[string]string{"probe": probe(t), "room": room(t)}
	n := startNode(t, opts)
	m.Advance(time.Since(start))
	return n, m
}

// settle waits until no timer of the node is due within 10 s on its clock:
// the short waits of what the node is in the middle of (a WebSocket write
// has 5 s, a delivery's retry 100 ms) are over, so that a long Advance
// next cuts none of them short, as it would if they took that long.
func settle(t *testing.T, m *clock.Manual) {
	t.Helper()
	waitFor(t, time.Minute, "the node to settle", func() bool {
		at, ok := m.Next()
		return !ok || at.Sub(m.Now()) > 10*time.Second
	})
}

// An actor hibernates after IdleTimeout without events, counted on the
// node's clock from the end of its last event: not a moment before.
func TestIdleHibernationOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{IdleTimeout: time.Hour}) // which the wall clock would not reach in a test
	resident := func() float64 { return n.metric("wasmkeep_actors_resident") }
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	m.Advance(59 * time.Minute)
	if got := resident(); got != 1 {
		t.Fatalf("%v actors resident before the idle timeout, want 1", got)
	}
	n.expect("GET", "/actor/probe/a/hits", "", 200, "2") // the same instance; the timeout starts again
	m.Advance(59 * time.Minute)
	n.expect("GET", "/actor/probe/a/hits", "", 200, "3")
	m.Advance(time.Hour)
	waitFor(t, time.Minute, "the idle actor to hibernate", func() bool { return resident() == 0 })
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1") // a new instance
}

// An idle timeout that passes while a request runs (on a node alone, on the
// request's own goroutine: ADR 1066) does not hibernate the actor after it:
// the timeout counts from the request's end.
func TestIdleTimeoutDuringARequest(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n, m := newManualNode(t, node.Options{IdleTimeout: time.Hour, AllowOutbound: loopback})
	resident := func() float64 { return n.metric("wasmkeep_actors_resident") }
	n.expect("GET", "/actor/probe/x/hits", "", 200, "1")
	m.Advance(59 * time.Minute)
	done := make(chan string, 1)
	go func() { done <- fetch(n, "x", srv.URL, 0) }()
	awaitHeld(t, arrived)
	m.Advance(2 * time.Minute) // the idle timeout passes while the event runs
	close(release)
	if got := <-done; got != "200 released" {
		t.Fatalf("fetch: %q", got)
	}
	time.Sleep(500 * time.Millisecond) // what a hibernation after the event would take
	if got := resident(); got != 1 {
		t.Fatalf("%v actors resident right after an event, want 1", got)
	}
	m.Advance(59 * time.Minute)
	n.expect("GET", "/actor/probe/x/hits", "", 200, "3") // the same instance: the fetch counted one
}

// Due alarms fire in the order of their times on the node's clock, and not
// before it reaches them (hours ahead: the wall clock would not reach them
// in a test).
func TestAlarmOrderOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	for name, in := range map[string]time.Duration{"a": 3 * time.Hour, "b": time.Hour, "c": 2 * time.Hour} {
		n.expect("GET", fmt.Sprintf("/actor/probe/%s/alarm-set?in=%d", name, in.Milliseconds()), "", 200, "set")
	}
	check := func(want map[string]int) {
		t.Helper()
		for name, w := range want {
			if w > 0 {
				waitFor(t, time.Minute, "the alarm of "+name, func() bool { return attempts(n, name) >= w })
			}
			if got := attempts(n, name); got != w {
				t.Fatalf("%s: %d attempts, want %d (all: %v)", name, got, w, want)
			}
		}
	}
	check(map[string]int{"a": 0, "b": 0, "c": 0})
	m.Advance(90 * time.Minute)
	check(map[string]int{"b": 1, "a": 0, "c": 0})
	m.Advance(time.Hour)
	check(map[string]int{"c": 1, "a": 0, "b": 1})
	m.Advance(time.Hour)
	check(map[string]int{"a": 1, "b": 1, "c": 1})
}

// A failing on-alarm is tried again 1 s later, then 2 s after that, on the
// node's clock; once it succeeds the alarm is gone. The alarm is an hour
// ahead, so the retries are too: the wall clock would reach none of them.
func TestAlarmRetryOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{})
	n.expect("POST", "/actor/probe/r/exec", "CREATE TABLE fail_alarm (x)", 200, "ok 0")
	n.expect("GET", "/actor/probe/r/alarm-set?in=3600000", "", 200, "set")
	m.Advance(time.Hour + 500*time.Millisecond) // the first attempt fails
	waitFor(t, time.Minute, "the first attempt", func() bool { return attempts(n, "r") == 1 })
	m.Advance(900 * time.Millisecond) // 0.9 s of the 1 s backoff
	if got := attempts(n, "r"); got != 1 {
		t.Fatalf("%d attempts before the retry was due, want 1", got)
	}
	m.Advance(200 * time.Millisecond) // the second attempt fails: the next waits 2 s
	waitFor(t, time.Minute, "the second attempt", func() bool { return attempts(n, "r") == 2 })
	if _, body := n.do("POST", "/actor/probe/r/exec", "DROP TABLE fail_alarm"); !strings.HasPrefix(body, "ok ") {
		t.Fatalf("DROP TABLE fail_alarm: %q", body)
	}
	m.Advance(1900 * time.Millisecond)
	if got := attempts(n, "r"); got != 2 {
		t.Fatalf("%d attempts before the second retry was due, want 2", got)
	}
	m.Advance(200 * time.Millisecond) // the third succeeds
	waitFor(t, time.Minute, "the third attempt", func() bool { return attempts(n, "r") == 3 })
	n.expect("GET", "/actor/probe/r/alarm-get", "", 200, "none")
}

// pingedClient is a WebSocket client that reads all the time, counting the
// pings it gets and answering them only if it was told to; the text it
// reads arrives on msgs, and closed is closed once the socket is.
type pingedClient struct {
	t      *testing.T
	conn   *websocket.Conn
	pings  atomic.Int32
	msgs   chan string
	closed chan struct{}
	err    error // what ended the socket, once closed is
}

func dialPinged(t *testing.T, tn *testNode, path string, answer bool) *pingedClient {
	t.Helper()
	c := &pingedClient{t: t, msgs: make(chan string, 64), closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(tn.url, "http")+path, &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { c.pings.Add(1); return answer },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.conn = conn
	t.Cleanup(func() { conn.CloseNow() })
	go func() {
		defer close(c.closed)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				c.err = err
				return
			}
			c.msgs <- string(b)
		}
	}()
	return c
}

// expect reads the client's next message and checks it is want.
func (c *pingedClient) expect(want string) {
	c.t.Helper()
	select {
	case got := <-c.msgs:
		if got != want {
			c.t.Fatalf("read %q, want %q", got, want)
		}
	case <-c.closed:
		c.t.Fatalf("closed while waiting for %q: %v", want, c.err)
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no message %q", want)
	}
}

// echo sends text to the room and reads it back on every client in all.
func (c *pingedClient) echo(text string, all ...*pingedClient) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(text)); err != nil {
		c.t.Fatalf("writing %q: %v", text, err)
	}
	for _, o := range all {
		o.expect(text)
	}
}

func (c *pingedClient) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// A client silent for WebSocketPingAfter on the node's clock gets a ping
// (not a moment before, counted from its last message); one that does not
// answer it within WebSocketPongWait has its socket closed (1006 in the
// actor's close event), one that answers keeps it. An hour and a minute:
// the wall clock would reach neither in a test.
func TestWebSocketPingOnClock(t *testing.T) {
	n, m := newManualNode(t, node.Options{WebSocketPingAfter: time.Hour, WebSocketPongWait: time.Minute})
	live := dialPinged(t, n, "/actor/room/p/", true)
	live.expect("welcome 1")
	silent := dialPinged(t, n, "/actor/room/p/", false) // reads, but leaves pings unanswered
	silent.expect("welcome 2")
	// Times below are from the moment both opened, the clock's reading now.
	// A ping the node sent before a message it broadcasts comes first on
	// that socket: the echoes show that none was sent.
	settle(t, m)
	m.Advance(59 * time.Minute) // 59m
	live.echo("quiet", live, silent)
	if got := live.pings.Load() + silent.pings.Load(); got != 0 {
		t.Fatalf("%d pings before a client was silent for WebSocketPingAfter", got)
	}
	settle(t, m)
	m.Advance(time.Minute) // 60m: silent is pinged; live spoke at 59m
	waitFor(t, time.Minute, "the silent client's ping", func() bool { return silent.pings.Load() == 1 })
	live.echo("not yet", live, silent)
	if got := live.pings.Load(); got != 0 {
		t.Fatalf("live was pinged %d times a minute after its last message", got)
	}

	settle(t, m)
	m.Advance(59 * time.Second) // 60m59s: silent's pong is a second from overdue
	silent.echo("still open", silent, live)
	n.expect("GET", "/actor/room/p/", "", 200, "") // no close event yet
	m.Advance(time.Second)                         // 61m (a second: cuts no write short, and the pong wait ends within 10 s)
	waitCloses(t, n, "/actor/room/p/", "1006 \n")
	waitFor(t, time.Minute, "the silent client to see its socket closed", silent.isClosed)

	settle(t, m)
	m.Advance(59 * time.Minute) // 120m: an hour after live's last message
	waitFor(t, time.Minute, "the live client's ping", func() bool { return live.pings.Load() == 1 })
	// live's reader answers the ping before it reads the next message, so
	// once the first echo is read the pong has gone out, and the second
	// message follows it: its echo means the node has read the pong.
	live.echo("after the ping", live)
	live.echo("after the pong", live)
	settle(t, m)
	m.Advance(time.Minute) // 121m: past the pong wait
	live.echo("still here", live)
	if live.isClosed() {
		t.Fatal("the client that answered the ping was closed")
	}
	n.expect("GET", "/actor/room/p/", "", 200, "1006 \n")
}

// holdingServer answers a request only once release is closed (or the
// client goes away); arrived gets a value as each request arrives.
func holdingServer(t *testing.T) (srv *httptest.Server, arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 16), make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
			fmt.Fprint(w, "released")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return srv, arrived, release
}

// awaitHeld waits for a request to reach a holdingServer.
func awaitHeld(t *testing.T, arrived chan struct{}) {
	t.Helper()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the request to hold did not reach the server")
	}
}

// With every resident slot held by a busy actor, a request to another
// actor waits AdmissionWait on the node's clock for a slot (an hour: the
// wall clock would not reach it in a test), then is refused with 503 and
// Retry-After; once the busy actor is idle, the other gets in.
func TestAdmissionWaitOnClock(t *testing.T) {
	srv, arrived, release := holdingServer(t)
	n, m := newManualNode(t, node.Options{MaxInstances: 1, AdmissionWait: time.Hour, AllowOutbound: loopback})
	busy := make(chan string, 1)
	go func() { busy <- fetch(n, "busy", srv.URL, 0) }()
	awaitHeld(t, arrived) // busy is in its event, which the fetch holds
	armed := m.Armed()
	type answer struct {
		code int
		hdr  http.Header
	}
	other := make(chan answer, 1)
	go func() {
		code, _, hdr := n.doH("GET", "/actor/probe/other/hits", "", nil)
		other <- answer{code, hdr}
	}()
	waitFor(t, time.Minute, "the admission to wait on the clock", func() bool { return m.Armed() > armed })
	m.Advance(59 * time.Minute)
	select { // a refusal would come at once: give it half a second to show
	case a := <-other:
		t.Fatalf("answered %d before AdmissionWait", a.code)
	case <-time.After(500 * time.Millisecond):
	}
	m.Advance(time.Minute)
	select {
	case a := <-other:
		if a.code != 503 || a.hdr.Get("Retry-After") != "1" {
			t.Fatalf("after AdmissionWait: %d, Retry-After %q; want 503, 1", a.code, a.hdr.Get("Retry-After"))
		}
	case <-time.After(time.Minute):
		t.Fatal("no answer after AdmissionWait")
	}
	if got := n.metric(`wasmkeep_admission_refused_total{reason="capacity"}`); got != 1 {
		t.Errorf("refused for capacity: %v, want 1", got)
	}
	close(release)
	if got := <-busy; got != "200 released" {
		t.Fatalf("the busy actor's fetch: %q", got)
	}
	n.expect("GET", "/actor/probe/other/hits", "", 200, "1") // the idle busy actor makes room
}
