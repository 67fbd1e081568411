package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	mtlstransport "github.com/wasmkeep/wasmkeep/plugins/transport-mtls"
)

// What one node may not make another believe (issue 15, Tests; book:
// Calls between nodes, Encryption between nodes). Two nodes on one
// bucket-fs: a with --cluster-plaintext accept, which believes a signed
// call on its public port (so the test, holding the cluster secret, can
// send one there over plain HTTP), and r in the default refuse mode. Both
// serve the probe guest as probe (open) and as inner (internal); both
// have a cluster listener (mutual TLS).

// secretOf is the cluster secret of the bucket-fs at dir (created by the
// first node there, or by this call if there is none yet).
func secretOf(t *testing.T, dir string) callsign.Secret {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := callsign.LoadSecret(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// heartbeat is node id's lease object in the bucket-fs at dir; it must
// name a cluster address.
func heartbeat(t *testing.T, dir, id string) nodelease.Object {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := nodelease.ReadObject(t.Context(), b, id)
	if err != nil || !r.Found || r.Err != nil || r.Object.Info.ClusterAddr == "" || len(r.Object.Info.Pins) != 1 {
		t.Fatalf("nodes/%s: %+v %v, want a heartbeat with a cluster address and a pin", id, r, err)
	}
	return r.Object
}

// clusterAddr is node id's cluster listener (host:port), from its
// heartbeat in the bucket-fs at dir.
func clusterAddr(t *testing.T, dir, id string) string {
	t.Helper()
	u, err := url.Parse(heartbeat(t, dir, id).Info.ClusterAddr)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// signed is a request for target's public port at u, signed by s as
// target's peer would sign an actors.call from caller.
func signed(t *testing.T, s *callsign.Signer, target, method, u, caller string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	s.Sign(callsign.Call{Target: target, App: "default/default", Method: method, Path: req.URL.RequestURI(), Body: body, Caller: caller}, req.Header)
	return req
}

// send sends a copy of req (its method, URL, headers and body) and reads
// the answer.
func send(t *testing.T, req *http.Request, body []byte) reply {
	t.Helper()
	out, _ := http.NewRequest(req.Method, req.URL.String(), bytes.NewReader(body))
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("x-wasmkeep-node")}
}

// selfSigned is a certificate no node's heartbeat names.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// stranger connects to a node's cluster port as a TLS 1.3 client with
// certs (none: no client certificate), sends an HTTP request for an actor
// and returns what came back before the connection ended, and how it
// ended: a node must answer nothing at all, neither its acceptance byte
// nor HTTP.
func stranger(t *testing.T, addr string, certs []tls.Certificate, path string) (got []byte, err error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		Certificates: certs, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return nil, err // refused within the client's handshake
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// TLS 1.3: the client's handshake ends before the server judged its
	// certificate; the request leaves at once, as a peer's would.
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

func TestNodeRefusals(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	dir := memDir(t)
	bucketURL := "file://" + dir
	classes := []string{"--actor", "probe=" + probe(t), "--actor", "inner=" + probe(t), "--access", "inner=internal",
		"--bucket", bucketURL}
	a, r := newBucketNode(t, bucketURL, nil), newBucketNode(t, bucketURL, nil)
	a.args = append(append([]string{}, classes...), "--node-id", "a", "--cluster-plaintext", "accept")
	r.args = append(append([]string{}, classes...), "--node-id", "r")
	a.start()
	r.start()
	logs := func() string { return "\na:\n" + a.logs.String() + "\nr:\n" + r.logs.String() }
	want := func(what string, got reply, code int, body string) {
		t.Helper()
		if got.code != code || !strings.Contains(got.body, body) {
			t.Fatalf("%s: %d %q, want %d and %q%s", what, got.code, got.body, code, body, logs())
		}
	}
	secret := secretOf(t, dir)
	signer := callsign.NewSigner(secret, clock.Real)
	const caller = "default/probe/p9"
	believed := `["` + caller + `"]`

	// The control: a good signature on a's public port is believed, the
	// caller seen, an internal class reached.
	good := signed(t, signer, "a", "POST", a.url+"/actor/probe/x/caller", caller, nil)
	want("a signed call in accept mode", send(t, good, nil), 200, believed)
	want("a signed call to an internal class", send(t, signed(t, signer, "a", "POST", a.url+"/actor/inner/x/caller", caller, nil), nil), 200, believed)

	// Each refused with 403, before the actor: probe/fresh has its first
	// hit after them.
	const fresh = "/actor/probe/fresh/hits"
	other := secretOf(t, t.TempDir()) // another cluster's secret
	past := clock.NewManual(time.Now().Add(-2 * time.Minute))
	future := clock.NewManual(time.Now().Add(2 * time.Minute))
	want("the same signed call again", send(t, good, nil), 403, "replayed")
	want("a signature under another secret", send(t, signed(t, callsign.NewSigner(other, clock.Real), "a", "POST", a.url+fresh, caller, nil), nil), 403, "the MAC does not match")
	want("a signature of 2 minutes ago", send(t, signed(t, callsign.NewSigner(secret, past), "a", "POST", a.url+fresh, caller, nil), nil), 403, "expired")
	want("a signature 2 minutes ahead", send(t, signed(t, callsign.NewSigner(secret, future), "a", "POST", a.url+fresh, caller, nil), nil), 403, "expired")
	want("a call signed for another node", send(t, signed(t, signer, "r", "POST", a.url+fresh, caller, nil), nil), 403, "misaddressed")
	want("a signed call whose body changed", send(t, signed(t, signer, "a", "POST", a.url+fresh, caller, []byte("signed")), []byte("sent")), 403, "the MAC does not match")
	tampered := signed(t, signer, "a", "POST", a.url+fresh, caller, nil)
	tampered.Header.Set(callsign.CallerHeader, "default/inner/admin")
	want("a signed call whose caller changed", send(t, tampered, nil), 403, "the MAC does not match")
	want("the first hit of probe/fresh", ask(t, "POST", a.url+fresh), 200, "1")

	// A client's x-wasmkeep-caller is never believed: not on a, not on r,
	// not forwarded (probe/x is held by a), and an internal class refuses
	// the client anyway.
	forged := func(u string) reply {
		req, _ := http.NewRequest("POST", u, nil)
		req.Header.Set(callsign.CallerHeader, caller)
		req.Header.Set(callsign.ChainHeader, "default%2Fprobe%2Fp9")
		return send(t, req, nil)
	}
	want("a client's caller on a", forged(a.url+"/actor/probe/x/caller"), 200, "[]")
	want("a client's caller on r", forged(r.url+"/actor/probe/y/caller"), 200, "[]")
	if got := forged(r.url + "/actor/probe/x/caller"); got.node != "a" || got.body != "[]" {
		t.Fatalf("a client's caller forwarded by r to a: %+v, want [] from a%s", got, logs())
	}
	want("a client's caller to an internal class on a", forged(a.url+"/actor/inner/x/caller"), 403, "internal")
	want("a client's caller to an internal class, forwarded", forged(r.url+"/actor/inner/x/caller"), 403, "internal")

	// r refuses plain calls between nodes: a valid signature for r on its
	// public port is a client's request (no caller, internal refused).
	// It is spent: a copy on r's cluster port is refused (below).
	spent := signed(t, signer, "r", "POST", r.url+"/actor/probe/y/caller", caller, nil)
	want("a signed call on r's public port", send(t, spent, nil), 200, "[]")
	want("a signed call to an internal class on r's public port", send(t, signed(t, signer, "r", "POST", r.url+"/actor/inner/y/caller", caller, nil), nil), 403, "internal")

	// The real thing: r's probe calls a's internal actor over mutual TLS,
	// signed; the callee sees the caller r's host names.
	want("a's probe calling inner/x on a", ask(t, "POST", a.url+"/actor/probe/q/call?to=inner/x&path=/caller"), 200, `200 ["default/probe/q"]`)
	if got := ask(t, "POST", r.url+"/actor/probe/p/call?to=inner/x&path=/caller"); got.node != "r" || got.body != `200 ["default/probe/p"]` {
		t.Fatalf("r's probe calling inner/x on a: %+v, want the caller r names%s", got, logs())
	}

	// A call's path reaches a callee on another node as it would on one
	// node, a space or a control character in it included: percent-encoded
	// on the request line, the same once decoded (the probe echoes the raw
	// query).
	for p, echo := range map[string]string{"/echo?c d": "/echo?c%20d", "/echo?t=\x01": "/echo?t=%01"} {
		q := "/call?to=probe/x&path=" + url.QueryEscape(p)
		want("a's probe calling probe/x on a with "+strconv.Quote(p), ask(t, "POST", a.url+"/actor/probe/q"+q), 200, "200 POST "+p+" 0")
		if got := ask(t, "POST", r.url+"/actor/probe/p"+q); got.node != "r" || got.body != "200 POST "+echo+" 0" {
			t.Fatalf("r's probe calling probe/x on a with %q: %+v, want it echoed as %q%s", p, got, echo, logs())
		}
	}

	// A peer r trusts: the test, with a lease of its own in the bucket.
	// On r's cluster port a peer's unsigned request is a client's,
	// forwarded (its caller dropped, internal classes refused); a signed
	// call is believed once; the signature r's public port spent, a stale
	// one and a forged one are refused. Once the peer's lease is released,
	// r cuts its kept-alive connection and accepts no new one.
	fp := newForgedPeer(t, dir, "t")
	rhb := heartbeat(t, dir, "r")
	var pc *peerConn
	waitFor(t, 10*time.Second, "r to trust the test's lease", func() bool {
		var err error
		pc, err = fp.dial("r", rhb)
		return err == nil
	})
	wantPeer := func(what string, req *http.Request, body []byte, code int, text string) {
		t.Helper()
		got, err := pc.do(req, body)
		if err != nil || got.code != code || !strings.Contains(got.body, text) {
			t.Fatalf("%s on r's cluster port: %+v %v, want %d and %q%s", what, got, err, code, text, logs())
		}
	}
	unsigned := func(path string) *http.Request {
		req, _ := http.NewRequest("POST", "http://peer"+path, nil)
		req.Header.Set(callsign.CallerHeader, caller)
		return req
	}
	wantPeer("a peer's unsigned request with a caller", unsigned("/actor/probe/y/caller"), nil, 200, "[]")
	wantPeer("a peer's unsigned request to an internal class", unsigned("/actor/inner/y/caller"), nil, 403, "internal")
	wantPeer("the signature r's public port spent", spent, nil, 403, "replayed")
	callR := signed(t, signer, "r", "POST", r.url+"/actor/inner/y/caller", caller, nil)
	wantPeer("a signed call to an internal class", callR, nil, 200, believed)
	wantPeer("the same signed call again", callR, nil, 403, "replayed")
	wantPeer("a signature of 2 minutes ago", signed(t, callsign.NewSigner(secret, past), "r", "POST", r.url+"/actor/inner/y/caller", caller, nil), nil, 403, "expired")
	wantPeer("a signature under another secret", signed(t, callsign.NewSigner(other, clock.Real), "r", "POST", r.url+"/actor/inner/y/caller", caller, nil), nil, 403, "the MAC does not match")
	fp.release()
	waitFor(t, 10*time.Second, "r to cut the released peer's connection", func() bool {
		got, err := pc.do(unsigned("/actor/probe/y/hits"), nil)
		return err != nil || got.code == 503
	})
	if _, err := fp.dial("r", rhb); err == nil {
		t.Fatalf("r accepted a new connection from a peer whose lease is released%s", logs())
	}

	// A peer with an unknown pin: a TLS client with a certificate no
	// heartbeat names, or none, gets nothing from either cluster port; its
	// request never reaches probe/stranger.
	for i, n := range []struct {
		id  string
		url string
	}{{"a", a.url}, {"r", r.url}} {
		addr := clusterAddr(t, dir, n.id)
		for what, certs := range map[string][]tls.Certificate{"a self-signed certificate": {selfSigned(t)}, "no certificate": nil} {
			got, err := stranger(t, addr, certs, "/actor/probe/stranger/hits")
			if len(got) > 0 {
				t.Fatalf("%s on %s's cluster port: got %q (%v), want nothing%s", what, n.id, got, err, logs())
			}
			t.Logf("%s on %s's cluster port: %v", what, n.id, err)
		}
		// A client speaking plain HTTP to the cluster port: no answer either.
		if resp, err := http.Post("http://"+addr+"/actor/probe/stranger/hits", "", nil); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("plain HTTP on %s's cluster port: %d %q, want no answer", n.id, resp.StatusCode, b)
		}
		// probe/stranger is held by a from the first round; each round
		// adds one hit, the strangers none.
		if got := ask(t, "POST", n.url+"/actor/probe/stranger/hits"); got.code != 200 || got.body != strconv.Itoa(i+1) {
			t.Fatalf("probe/stranger after the strangers on %s: %+v, want hit %d%s", n.id, got, i+1, logs())
		}
	}
	a.stop()
	r.stop()
}

// forgedPeer is the test passing for node id of the bucket-fs at dir, as
// whoever can write the bucket can (book ADR 0011): a live lease it keeps
// rewriting, naming the pin of a transport-mtls of its own, so that the
// nodes trust it as a peer.
type forgedPeer struct {
	id   string
	tr   *mtlstransport.Transport
	info nodelease.Info // what its lease says besides its pin
	b    bucket.Bucket
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newForgedPeer(t *testing.T, dir, id string) *forgedPeer {
	t.Helper()
	tr, err := mtlstransport.Open(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return startForgedPeer(t, dir, id, tr, nodelease.Info{Advertise: "http://127.0.0.1:1", ClusterAddr: "https://127.0.0.1:1"})
}

// startForgedPeer starts the lease of a forged peer whose transport is tr
// and whose lease says info.
func startForgedPeer(t *testing.T, dir, id string, tr *mtlstransport.Transport, info nodelease.Info) *forgedPeer {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	info.Version, info.Pins = "test", []string{tr.Pin()}
	p := &forgedPeer{id: id, tr: tr, info: info, b: b, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for seq := uint64(1); ; seq++ {
			p.write(nodelease.Live, seq)
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		p.release()
		tr.Close()
		b.Close()
	})
	return p
}

func (p *forgedPeer) write(state nodelease.State, seq uint64) error {
	o := nodelease.Object{State: state, Instance: "forgedpeer", Seq: seq, WrittenAt: time.Now(), Info: p.info}
	body := o.Encode()
	_, err := p.b.Put(context.Background(), nodelease.Key(p.id), bytes.NewReader(body), int64(len(body)), bucket.Condition{})
	return err
}

// release stops the lease and writes it released, as a clean stop does.
func (p *forgedPeer) release() {
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		p.write(nodelease.Released, 0)
	})
}

// dial opens a connection to node's cluster listener (its heartbeat hb),
// which accepts it only while node trusts this peer's lease.
func (p *forgedPeer) dial(node string, hb nodelease.Object) (*peerConn, error) {
	p.tr.Trust(map[transport.NodeID]string{transport.NodeID(node): hb.Info.Pins[0]})
	u, err := url.Parse(hb.Info.ClusterAddr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.tr.Dial(ctx, transport.NodeID(node), u.Host)
	if err != nil {
		return nil, err
	}
	return &peerConn{c: c, br: bufio.NewReader(c)}, nil
}

// peerConn is HTTP/1.1 on one kept-alive connection to a cluster port.
type peerConn struct {
	c  net.Conn
	br *bufio.Reader
}

// do sends a copy of req (its method, path and query, headers) with body.
func (pc *peerConn) do(req *http.Request, body []byte) (reply, error) {
	out, _ := http.NewRequest(req.Method, "http://peer"+req.URL.RequestURI(), bytes.NewReader(body))
	out.Header = req.Header.Clone()
	pc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := out.Write(pc.c); err != nil {
		return reply{}, err
	}
	resp, err := http.ReadResponse(pc.br, out)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get(peers.NodeHeader)}, err
}
