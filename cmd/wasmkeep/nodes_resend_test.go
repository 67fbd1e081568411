package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
	mtlstransport "github.com/wasmkeep/wasmkeep/plugins/transport-mtls"
)

// A caller its peer briefly stopped trusting (book, Running a cluster;
// issue 26, item 6): node a, a real process, calls and relays an upgrade
// to actor probe/held, which the test holds as peer t (its lease and the
// actor's ownership record forged in the bucket, a mutual-TLS listener of
// its own on loopback). t refuses a's certificate at the handshake until
// the test makes it trust a, as a peer's listing does once it read a's
// next heartbeat. a sends the call or upgrade once more after that
// heartbeat: answered by t. A t that keeps refusing fails the call with
// "refused this node's certificate", having run nothing.
func TestResendAfterRefusal(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	dir := memDir(t)
	a := newBucketNode(t, "file://"+dir, steadyLease)
	a.args = []string{"--actor", "probe=" + probe(t), "--bucket", "file://" + dir, "--node-id", "a"}
	a.start()
	defer a.stop()

	// t: a listener serving probe/held (an echo for a WebSocket), trusting
	// nobody yet, and a live lease naming it.
	tr, err := mtlstransport.Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tr.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.Header.Get("Upgrade") == "" {
			w.Write([]byte("from t"))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, msg, err := c.Read(context.Background())
		if err == nil {
			c.Write(context.Background(), typ, msg)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	startForgedPeer(t, dir, "t", tr, nodelease.Info{App: "default/default", Advertise: "http://127.0.0.1:1", ClusterAddr: "https://" + ln.Addr().String()})
	b := fileBucket(t, dir)
	rec := ownership.Record{Node: "t", Instance: "forgedpeer", Generation: 1}.Encode()
	key := "state/default/default/" + ownership.Actor{Tenant: "default", Class: "probe", Name: "held"}.Key()
	if _, err := b.Put(t.Context(), key, bytes.NewReader(rec), int64(len(rec)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	trustA := func() { tr.Trust(map[transport.NodeID]string{"a": heartbeat(t, dir, "a").Info.Pins[0]}) }
	// refusals waits until a reported its n-th refusal it will send again.
	refusals := func(n int) {
		t.Helper()
		waitFor(t, 20*time.Second, "a to report t's refusal", func() bool {
			return strings.Count(a.logs.String(), "sending once more") >= n
		})
	}
	call := func() chan reply {
		done := make(chan reply, 1)
		go func() { done <- ask(t, "POST", a.url+"/actor/probe/p/call?to=probe/held&path=/x") }()
		return done
	}

	// The control: t keeps refusing. The call is sent once more after a's
	// heartbeat, refused again, and fails; t ran nothing. (Until a listed
	// t's lease, t is not live to it: the record's holder "is not
	// reachable".)
	var got reply
	waitFor(t, 20*time.Second, "a to list t", func() bool {
		got = <-call()
		return !strings.Contains(got.body, peers.MsgUnreachable)
	})
	if !strings.Contains(got.body, "refused this node's certificate") || served.Load() != 0 {
		t.Fatalf("a call t kept refusing: %+v, t ran %d; want the refusal, nothing run\n%s", got, served.Load(), a.logs)
	}
	refusals(1)

	// t trusts a after the refusal: the call's second try is answered.
	done := call()
	refusals(2)
	trustA()
	if got := <-done; got.body != "200 from t" || served.Load() != 1 {
		t.Fatalf("a call t refused, then trusted: %+v, t ran %d; want t's answer, run once\n%s", got, served.Load(), a.logs)
	}

	// The same for a WebSocket upgrade relayed through a, the client
	// waiting: it opens, and its messages reach t.
	tr.Trust(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	opened := make(chan error, 1)
	var conn *websocket.Conn
	go func() {
		var err error
		conn, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/actor/probe/held/ws", nil)
		opened <- err
	}()
	refusals(3)
	trustA()
	if err := <-opened; err != nil {
		t.Fatalf("an upgrade t refused, then trusted: %v\n%s", err, a.logs)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.Read(ctx); err != nil || string(msg) != "ping" || served.Load() != 2 {
		t.Fatalf("the relayed socket: %q %v, t ran %d; want the echo\n%s", msg, err, served.Load(), a.logs)
	}
}
