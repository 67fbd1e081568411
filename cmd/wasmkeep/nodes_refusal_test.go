package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
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

// clusterAddr is node id's cluster listener (host:port), from its
// heartbeat in the bucket-fs at dir.
func clusterAddr(t *testing.T, dir, id string) string {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := nodelease.ReadObject(t.Context(), b, id)
	if err != nil || !r.Found || r.Err != nil || r.Object.Info.ClusterAddr == "" {
		t.Fatalf("nodes/%s: %+v %v, want a heartbeat with a cluster address", id, r, err)
	}
	u, err := url.Parse(r.Object.Info.ClusterAddr)
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
	s.Sign(callsign.Call{Target: target, Method: method, Path: req.URL.RequestURI(), Body: body, Caller: caller}, req.Header)
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
// and returns what came back before the connection ended: a node must
// answer nothing at all, neither its acceptance byte nor HTTP.
func stranger(t *testing.T, addr string, certs []tls.Certificate, path string) (handshake error, got []byte) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		Certificates: certs, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return err, nil // refused within the client's handshake
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// TLS 1.3: the client's handshake ends before the server judged its
	// certificate; the request leaves at once, as a peer's would.
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		return err, nil
	}
	got, err = io.ReadAll(c)
	return err, got
}

func TestNodeRefusals(t *testing.T) {
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
	// What is checked of its spending: nothing believed; a copy is not
	// sent anywhere it would count (r's cluster port takes only peers).
	want("a signed call on r's public port", send(t, signed(t, signer, "r", "POST", r.url+"/actor/probe/y/caller", caller, nil), nil), 200, "[]")
	want("a signed call to an internal class on r's public port", send(t, signed(t, signer, "r", "POST", r.url+"/actor/inner/y/caller", caller, nil), nil), 403, "internal")

	// The real thing: r's probe calls a's internal actor over mutual TLS,
	// signed; the callee sees the caller r's host names.
	want("a's probe calling inner/x on a", ask(t, "POST", a.url+"/actor/probe/q/call?to=inner/x&path=/caller"), 200, `200 ["default/probe/q"]`)
	if got := ask(t, "POST", r.url+"/actor/probe/p/call?to=inner/x&path=/caller"); got.node != "r" || got.body != `200 ["default/probe/p"]` {
		t.Fatalf("r's probe calling inner/x on a: %+v, want the caller r names%s", got, logs())
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
			err, got := stranger(t, addr, certs, "/actor/probe/stranger/hits")
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
