package mtlstransport

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// node is a transport listening on 127.0.0.1, its accepted connections
// handshaken (PeerOf) as a server reading at once would.
type node struct {
	tr       *Transport
	addr     string
	accepted chan result
}

type result struct {
	conn net.Conn
	peer transport.Peer
	err  error
}

func newNode(t *testing.T, timeout time.Duration) *node {
	t.Helper()
	tr, err := Open(timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	l, err := tr.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{tr: tr, addr: l.Addr().String(), accepted: make(chan result, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				p, err := tr.PeerOf(c)
				n.accepted <- result{c, p, err}
			}()
		}
	}()
	return n
}

func (n *node) next(t *testing.T) result {
	t.Helper()
	select {
	case r := <-n.accepted:
		t.Cleanup(func() { r.conn.Close() })
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return result{}
	}
}

// clientConfig is a TLS client holding a's certificate, as a's Dial
// would present it, with verification left to the test.
func clientConfig(a *Transport) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{a.cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13}
}

// A pin is the lowercase hex SHA-256 of the certificate's DER, the
// certificate a peer sees; every Open makes a new one.
func TestPinFormat(t *testing.T) {
	a, b := newNode(t, 5*time.Second), newNode(t, 5*time.Second)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a.tr.Pin()) {
		t.Fatalf("pin %q: want 64 lowercase hex digits", a.tr.Pin())
	}
	if a.tr.Pin() == b.tr.Pin() {
		t.Fatal("two transports share a pin")
	}
	b.tr.Trust(map[transport.NodeID]string{"a": a.tr.Pin()})
	c, err := tls.Dial("tcp", b.addr, clientConfig(a.tr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sum := sha256.Sum256(c.ConnectionState().PeerCertificates[0].Raw)
	if got := hex.EncodeToString(sum[:]); got != b.tr.Pin() {
		t.Errorf("the certificate b presents hashes to %s, b's pin is %s", got, b.tr.Pin())
	}
	if r := b.next(t); r.err != nil || r.peer != (transport.Peer{Node: "a", Pin: a.tr.Pin()}) {
		t.Errorf("b's PeerOf: %+v, %v", r.peer, r.err)
	}
	if cs := c.ConnectionState(); cs.Version != tls.VersionTLS13 || cs.NegotiatedProtocol != "" && cs.NegotiatedProtocol != "http/1.1" {
		t.Errorf("version %x, ALPN %q", cs.Version, cs.NegotiatedProtocol)
	}
}

// A client offering at most TLS 1.2, with a trusted certificate, is
// refused; so is a server offering at most 1.2 to Dial.
func TestTLS13Only(t *testing.T) {
	a, b := newNode(t, 5*time.Second), newNode(t, 5*time.Second)
	b.tr.Trust(map[transport.NodeID]string{"a": a.tr.Pin()})
	cfg := clientConfig(a.tr)
	cfg.MaxVersion = tls.VersionTLS12
	if c, err := tls.Dial("tcp", b.addr, cfg); err == nil {
		c.Close()
		t.Fatal("a TLS 1.2 client was accepted")
	}
	if r := b.next(t); r.err == nil {
		t.Errorf("b's PeerOf a TLS 1.2 client: %+v, want an error", r.peer)
	}

	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{b.tr.cert}, MaxVersion: tls.VersionTLS12, ClientAuth: tls.RequireAnyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	a.tr.Trust(map[transport.NodeID]string{"b": b.tr.Pin()})
	if c, err := a.tr.Dial(t.Context(), "b", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("Dial to a TLS 1.2 server with b's certificate succeeded")
	}
}

// recordingCache is a client session cache that records what a server
// offers to resume.
type recordingCache struct {
	mu   sync.Mutex
	puts int
}

func (r *recordingCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (r *recordingCache) Put(_ string, cs *tls.ClientSessionState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs != nil {
		r.puts++
	}
}

// The server issues no session ticket, even to a client that keeps them,
// so nothing can be resumed; a second connection is a full handshake.
func TestNoResumption(t *testing.T) {
	a, b := newNode(t, 5*time.Second), newNode(t, 5*time.Second)
	b.tr.Trust(map[transport.NodeID]string{"a": a.tr.Pin()})
	cache := &recordingCache{}
	cfg := clientConfig(a.tr)
	cfg.ClientSessionCache = cache
	for i := range 2 {
		c, err := tls.Dial("tcp", b.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// A TLS 1.3 ticket comes after the handshake: read past it, to the
		// acceptance byte.
		var buf [1]byte
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf[:]); err != nil || buf[0] != accepted {
			t.Fatalf("connection %d: read %x, %v; want the acceptance", i, buf[0], err)
		}
		if c.ConnectionState().DidResume {
			t.Errorf("connection %d resumed a session", i)
		}
		c.Close()
		b.next(t)
	}
	if cache.puts != 0 {
		t.Errorf("the server issued %d session tickets, want none", cache.puts)
	}
	// Dial keeps no session cache either.
	if a.tr.clientConfig(nil, "b").ClientSessionCache != nil || !a.tr.config().SessionTicketsDisabled {
		t.Error("a session cache or tickets in transport-mtls's own configuration")
	}
}

// A client that connects and says nothing is dropped when the handshake
// timeout ends: PeerOf returns an error rather than waiting for ever.
func TestHandshakeBounded(t *testing.T) {
	b := newNode(t, 200*time.Millisecond)
	c, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := b.next(t); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("PeerOf a silent client: %v, want the handshake's deadline", r.err)
	}
	// And Dial to a server that accepts and says nothing ends at its
	// context's deadline.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b.tr.Trust(map[transport.NodeID]string{"x": "00"})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if c, err := b.tr.Dial(ctx, "x", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("Dial to a silent server succeeded")
	}
}

// The plugin is a transport/v1 one, built from its configuration, whose
// handshake timeout must be positive.
func TestPlugin(t *testing.T) {
	in := Info()
	if in.Kind != "transport" || in.Name != "mtls" || in.API != transport.API {
		t.Errorf("Info: %s %s", in.ID(), in.API)
	}
	v, err := in.New(in.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := v.(transport.Transport)
	if !ok || !transport.Authenticates(tr) {
		t.Fatalf("New returned %T", v)
	}
	tr.Close()
	if _, err := New(&Config{}); err == nil {
		t.Error("handshake_timeout 0 accepted")
	}
}
