// Package mtlstransport is the transport/v1 plugin: node-to-node traffic
// over mutual TLS 1.3, each node's certificate pinned in its heartbeat
// (book ADR 0011; ADR 1029 for this plugin's choices). New makes an ECDSA
// P-256 key and a self-signed certificate in memory, so every start is a
// new identity; Pin is the certificate's SHA-256. A peer is accepted, and
// a dialed node believed, only if its certificate's pin is the one the
// trusted set holds for it, checked at every handshake (there is no
// session resumption to skip that check), and Trust cuts the connections
// of a peer it drops. Standard library only.
package mtlstransport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// Transport is one node's end of the cluster's mutual-TLS network.
type Transport struct {
	t       *transport.Tracker
	cert    tls.Certificate
	pin     string
	timeout time.Duration
}

var _ transport.Transport = (*Transport)(nil)

// Open makes a new key and certificate and returns a transport that
// trusts nobody yet; handshakes are bounded by timeout.
func Open(timeout time.Duration) (*Transport, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("handshake_timeout %v: must be positive", timeout)
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	return &Transport{t: transport.NewTracker(), cert: cert, pin: PinOf(cert.Certificate[0]), timeout: timeout}, nil
}

// PinOf is the pin of a certificate: the lowercase hex SHA-256 of its DER.
func PinOf(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// selfSigned makes an ECDSA P-256 key and a certificate for it, signed by
// itself. Nothing checks its names or dates: the pin is the identity.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making a serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "wasmkeep node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(100, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making a certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// config is what both ends share: TLS 1.3 only, this node's certificate,
// no session tickets (a resumed session would skip the pin check).
func (m *Transport) config() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{m.cert},
		NextProtos:             []string{"http/1.1"},
		SessionTicketsDisabled: true,
	}
}

// serverConfig accepts a client whose certificate's pin a trusted node
// publishes, and binds c to that node.
func (m *Transport) serverConfig(c *transport.Conn) *tls.Config {
	cfg := m.config()
	cfg.ClientAuth = tls.RequireAnyClientCert // verified by pin below, not by a CA
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		pin, err := peerPin(cs)
		if err != nil {
			return err
		}
		_, err = c.BindPin(pin)
		return err
	}
	return cfg
}

// clientConfig accepts a server only if its certificate's pin is the one
// peer is trusted at, and binds c to peer. There is no client session
// cache: nothing to resume.
func (m *Transport) clientConfig(c *transport.Conn, peer transport.NodeID) *tls.Config {
	cfg := m.config()
	cfg.InsecureSkipVerify = true // no CA and no names: VerifyConnection checks the pin
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		pin, err := peerPin(cs)
		if err != nil {
			return err
		}
		return c.Bind(peer, pin)
	}
	return cfg
}

// peerPin is the pin of the certificate the peer proved it holds the key
// of (the first it sent).
func peerPin(cs tls.ConnectionState) (string, error) {
	if cs.Version != tls.VersionTLS13 {
		return "", fmt.Errorf("TLS version %x, want 1.3", cs.Version)
	}
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: the peer sent no certificate", transport.ErrUntrusted)
	}
	return PinOf(cs.PeerCertificates[0].Raw), nil
}

// accepted is the byte a server writes once it has accepted a client, and
// Dial waits for: in TLS 1.3 a client's handshake ends before the server
// has judged the client's certificate, so without it Dial could return a
// connection the far end refuses.
const accepted = 0x01

// Listen accepts connections on addr; each one's handshake runs on its
// first Read, Write or PeerOf.
func (m *Transport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := m.t.Listen(ctx, addr, func(c *transport.Conn) {
		tc := tls.Server(c.Conn, m.serverConfig(c))
		c.Layer(tc, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, m.timeout)
			defer cancel()
			if err := tc.HandshakeContext(ctx); err != nil {
				return fmt.Errorf("mtls: handshake from %s: %w", c.RemoteAddr(), err)
			}
			if _, err := tc.Write([]byte{accepted}); err != nil {
				return fmt.Errorf("mtls: handshake from %s: %w", c.RemoteAddr(), err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("mtls: listen on %s: %w", addr, err)
	}
	return l, nil
}

// Dial connects to addr, checks that the server's certificate has the pin
// peer is trusted at, and returns once the server has accepted this node.
func (m *Transport) Dial(ctx context.Context, peer transport.NodeID, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	c, _, err := m.t.Dial(ctx, peer, addr, true)
	if err != nil {
		return nil, fmt.Errorf("mtls: dial %s at %s: %w", peer, addr, err)
	}
	tc := tls.Client(c.Conn, m.clientConfig(c, peer))
	c.Layer(tc, func(ctx context.Context) error {
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		deadline, _ := ctx.Deadline()
		tc.SetReadDeadline(deadline)
		var b [1]byte
		if _, err := io.ReadFull(tc, b[:]); err != nil {
			if refusedBy(err) {
				return fmt.Errorf("%w (is this node's pin live in its view?): %w", transport.ErrRefused, err)
			}
			return fmt.Errorf("the server did not accept this node: %w", err)
		}
		tc.SetReadDeadline(time.Time{})
		if b[0] != accepted {
			return fmt.Errorf("the server answered %#x, not the transport-mtls acceptance", b[0])
		}
		return nil
	})
	if err := c.Handshake(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("mtls: dial %s at %s: %w", peer, addr, err)
	}
	return c, nil
}

// refusedBy reports whether err is a TLS alert the server sent: its
// verifier refused this node's certificate (bad_certificate), where a
// server that accepts writes the acceptance byte instead.
func refusedBy(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// PeerOf completes conn's handshake if it has not run, and names the peer
// it proved.
func (m *Transport) PeerOf(conn net.Conn) (transport.Peer, error) {
	c, ok := m.t.Owns(conn)
	if !ok {
		return transport.Peer{}, fmt.Errorf("mtls: PeerOf a %T this transport did not make", conn)
	}
	if err := c.Handshake(context.Background()); err != nil {
		return transport.Peer{}, err
	}
	p, bound, err := c.Peer()
	switch {
	case err != nil:
		return transport.Peer{}, fmt.Errorf("mtls: %w", err)
	case !bound:
		return transport.Peer{}, errors.New("mtls: the handshake named no peer")
	}
	return p, nil
}

// Pin is the lowercase hex SHA-256 of this node's certificate.
func (m *Transport) Pin() string { return m.pin }

// Trust replaces the trusted set and cuts the connections of peers that
// left it or changed pin.
func (m *Transport) Trust(peers map[transport.NodeID]string) { m.t.Trust(peers) }

// Close ends the listeners and every connection.
func (m *Transport) Close() error { return m.t.Close() }
