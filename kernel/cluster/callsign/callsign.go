// Package callsign signs calls between nodes and checks them (book:
// Calls between nodes; ADR 1030). A node calling an actor on another node
// (actors.call, and the alarm hand-off that rides on it) signs the call
// with HMAC-SHA256 under the cluster's secret, stored once in the bucket at
// cluster/secret (LoadSecret). The signature covers the node the call is
// for, the caller's app (ADR 1045), the method, the request target, the
// body's SHA-256, the calling actor, the chain of actors waiting on the
// call, a timestamp and a nonce unique to each send. The receiver (Verifier) believes the caller and the
// chain only of a call whose signature is good, addressed to it, signed
// within a minute of its own clock either way, and never seen before: a
// bounded record of nonces accepts each signature once.
//
// Pure logic over a bucket.Bucket and a clock.Clock: no network, no
// time.Now. Signer and Verifier are safe for concurrent use.
package callsign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// The headers a signed call carries. What a client sets under any
// x-wasmkeep- name is never believed: Strip removes it all.
const (
	// CallerHeader names the calling actor, tenant/class/name with the name
	// percent-encoded, as the callee sees it.
	CallerHeader = "x-wasmkeep-caller"
	// ChainHeader lists the actor keys waiting in the call chain, each
	// percent-encoded (url.PathEscape), joined by ",".
	ChainHeader = "x-wasmkeep-chain"
	// AppHeader names the caller's app, tenant/app: a node serving another
	// app refuses the call before reading its body (ADR 1045).
	AppHeader = "x-wasmkeep-app"
	// SignatureHeader carries the signature:
	//	v1 t=<Unix ms> n=<nonce> to=<target node> mac=<HMAC-SHA256, hex>
	SignatureHeader = "x-wasmkeep-signature"
	// TakeHeader, "1", marks a take call (book ADR 0017; ADR 1052): the
	// receiver takes the actor rather than run a request. The signature
	// covers it, so it can be neither added nor stripped in transit.
	TakeHeader = "x-wasmkeep-take"
)

// Validity is how far a call's timestamp may be from the receiver's clock,
// either way. The replay record keeps a nonce until its timestamp +
// Validity has passed; a copy sent later is refused as expired.
const Validity = time.Minute

// DefaultCapacity is the replay record's bound when NewVerifier is given
// 0: that many calls accepted within a Validity window (about 17,000 calls
// a second, sustained) before calls are refused with ErrReplayFull.
const DefaultCapacity = 1 << 20

// version is the signature format. A node of another format refuses this
// one's calls, and says so (ErrBadSignature, "a node of another version?").
const version = "v1"

// domain opens every MAC input, so that no other use of the secret (none
// today) can produce a valid call signature.
const domain = "wasmkeep call signature v1"

const nonceLen = 16 // bytes; 22 characters of unpadded base64url

var (
	// ErrUnsigned: the request has no signature header. It is an outside
	// client's request, not a node's call.
	ErrUnsigned = errors.New("callsign: unsigned call")
	// ErrBadSignature: the signature header is malformed, of another
	// format, or its MAC does not match (another secret, or the request was
	// changed), or the call was signed for another node. The message is
	// the book's, for the log.
	ErrBadSignature = errors.New("bad, expired or misaddressed signature")
	// ErrExpired: a good signature whose timestamp is more than Validity
	// from this node's clock, either way.
	ErrExpired = errors.New("callsign: expired signature")
	// ErrReplayed: a good signature this node accepted before.
	ErrReplayed = errors.New("callsign: replayed signature")
	// ErrReplayFull: the replay record is full of nonces still valid. The
	// call is refused rather than a nonce forgotten early; it was not
	// recorded, so the same call may be sent again.
	ErrReplayFull = errors.New("callsign: replay record full")
)

// Call is what a node signs.
type Call struct {
	Target string   // the node id the call is for
	App    string   // the caller's app, tenant/app: the callee's too
	Method string   // as sent
	Path   string   // the request target as sent: path and query (url.URL.RequestURI)
	Body   []byte   // the whole request body
	Caller string   // the calling actor, tenant/class/name (name percent-encoded): a valid header value
	Chain  []string // the actor keys waiting in the call chain, none empty
	Take   bool     // a take call (TakeHeader)
}

// Signer signs the calls a node sends.
type Signer struct {
	key []byte
	clk clock.Clock
}

// NewSigner returns a signer under s, dating calls on clk.
func NewSigner(s Secret, clk clock.Clock) *Signer { return &Signer{key: s.key, clk: clk} }

// Sign sets c's app, caller, chain and signature headers on h, replacing any
// value there: each call gets a nonce of its own, so a call sent twice must
// be signed twice. The request must then be sent with c's method, path and
// body as they are.
func (s *Signer) Sign(c Call, h http.Header) {
	var nonce [nonceLen]byte
	rand.Read(nonce[:]) // never fails (crypto/rand, Go 1.24+)
	ts := s.clk.Now().UnixMilli()
	mac := sum(s.key, c.Target, c.App, c.Method, c.Path, sha256.Sum256(c.Body), c.Caller, c.Chain, ts, nonce[:], c.Take)
	h.Set(AppHeader, c.App)
	h.Del(TakeHeader)
	if c.Take {
		h.Set(TakeHeader, "1")
	}
	h.Set(CallerHeader, c.Caller)
	h.Set(ChainHeader, encodeChain(c.Chain))
	h.Set(SignatureHeader, fmt.Sprintf("%s t=%d n=%s to=%s mac=%s", version, ts,
		base64.RawURLEncoding.EncodeToString(nonce[:]), url.PathEscape(c.Target), hex.EncodeToString(mac)))
}

// Verifier checks the calls a node receives and records the nonces it
// accepted.
type Verifier struct {
	key  []byte
	self string
	rec  *record
}

// NewVerifier returns a verifier under s for the node self, reading the
// time on clk, whose replay record holds at most capacity nonces
// (DefaultCapacity if 0).
func NewVerifier(s Secret, self string, clk clock.Clock, capacity int) *Verifier {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Verifier{key: s.key, self: self, rec: newRecord(clk, capacity)}
}

// Verify checks a received call: method and path (the request target as
// received, http.Request.RequestURI), the whole body, and its headers. It
// returns the caller and chain the signature vouches for (and the app
// header: the caller checked it against its own app before the body), or an error
// wrapping ErrUnsigned, ErrBadSignature, ErrExpired, ErrReplayed or
// ErrReplayFull: every error means the call is refused (or, on a port that
// serves outside clients, treated as one, its x-wasmkeep- headers
// stripped). Once it returned nil, TakeHeader is believed too (Take).
//
// Verify spends a good signature: once it has returned nil, the same
// signature is refused as replayed until it expires, whatever the caller
// does with the result. A port that must not believe a call but must stop
// its replay elsewhere (the public port in refuse mode) calls Spend.
func (v *Verifier) Verify(method, path string, body []byte, h http.Header) (caller string, chain []string, err error) {
	sig, ok, err := one(h, SignatureHeader)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		return "", nil, ErrUnsigned
	}
	p, err := parseSignature(sig)
	if err != nil {
		return "", nil, err
	}
	app, _, err := one(h, AppHeader)
	if err != nil {
		return "", nil, err
	}
	caller, _, err = one(h, CallerHeader)
	if err != nil {
		return "", nil, err
	}
	enc, _, err := one(h, ChainHeader)
	if err != nil {
		return "", nil, err
	}
	if chain, err = decodeChain(enc); err != nil {
		return "", nil, err
	}
	take, marked, err := one(h, TakeHeader)
	if err != nil {
		return "", nil, err
	}
	if marked && take != "1" {
		return "", nil, fmt.Errorf("%w (malformed %s: %q, want 1)", ErrBadSignature, TakeHeader, take)
	}
	if v.key == nil {
		return "", nil, fmt.Errorf("%w (this node has no cluster secret)", ErrBadSignature)
	}
	want := sum(v.key, p.target, app, method, path, sha256.Sum256(body), caller, chain, p.ts, p.nonce[:], marked)
	if !hmac.Equal(p.mac, want) {
		return "", nil, fmt.Errorf("%w (the MAC does not match: another cluster secret, a request changed on the way, or a node of another version?)", ErrBadSignature)
	}
	if p.target != v.self {
		return "", nil, fmt.Errorf("%w (misaddressed: signed for node %q, this is %q)", ErrBadSignature, p.target, v.self)
	}
	if err := v.rec.admit(p.ts, p.nonce); err != nil {
		return "", nil, err
	}
	return caller, chain, nil
}

// Spend is Verify with its result discarded: a good signature is recorded,
// so that no copy of the call is accepted anywhere on this node, and
// nothing in it is believed. It returns Verify's error, for the log.
func (v *Verifier) Spend(method, path string, body []byte, h http.Header) error {
	_, _, err := v.Verify(method, path, body, h)
	return err
}

// Remembered is how many nonces the replay record holds, those expired
// by now not counted.
func (v *Verifier) Remembered() int { return v.rec.size() }

// Take reports whether a call Verify passed is a take call: only then is
// its TakeHeader believed.
func Take(h http.Header) bool { return h.Get(TakeHeader) != "" }

// OtherApp reports whether a signed call is for another app than app
// (tenant/app): its AppHeader, read before the body and believed only once
// Verify passed, names another, or none. Such a call is refused unread.
func OtherApp(h http.Header, app string) bool {
	return h.Get(SignatureHeader) != "" && h.Get(AppHeader) != app
}

// HostOwned says whether a header is one of the x-wasmkeep-* headers,
// which only a node sets (the caller, the node that answered, a call's
// signature): wherever a request or an answer crosses between a guest, a
// client and another node, those that arrive are dropped, so that nobody
// can pass for a caller.
func HostOwned(name string) bool {
	return len(name) >= len("x-wasmkeep-") && strings.EqualFold(name[:len("x-wasmkeep-")], "x-wasmkeep-")
}

// Strip removes every host-owned header from h: an outside client's are
// never believed, and a call's are believed only through Verify's result.
func Strip(h http.Header) {
	for k := range h {
		if HostOwned(k) {
			delete(h, k)
		}
	}
}

// one reads a header that may appear at most once: two values are a
// malformed call (one of them would be believed by some reader and not by
// another).
func one(h http.Header, name string) (string, bool, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, fmt.Errorf("%w (%d %s headers)", ErrBadSignature, len(vs), name)
}

// signature is a parsed signature header.
type signature struct {
	ts     int64
	nonce  [nonceLen]byte
	target string
	mac    []byte
}

// parseSignature reads "v1 t=<ms> n=<nonce> to=<target> mac=<hex>"
// exactly: one space between fields, in that order, the timestamp in
// decimal digits, the nonce 16 bytes of unpadded base64url, the MAC 32
// bytes of lowercase hex.
func parseSignature(s string) (signature, error) {
	bad := func(format string, args ...any) (signature, error) {
		return signature{}, fmt.Errorf("%w (malformed %s: %s)", ErrBadSignature, SignatureHeader, fmt.Sprintf(format, args...))
	}
	f := strings.Split(s, " ")
	if f[0] != version {
		v := f[0]
		if len(v) > 16 {
			v = v[:16] + "..."
		}
		return bad("format %q, this node reads %q: a node of another version?", v, version)
	}
	if len(f) != 5 {
		return bad("%d fields, want 5", len(f))
	}
	var p signature
	var ok bool
	var t, n, to, m string
	if t, ok = strings.CutPrefix(f[1], "t="); !ok || !digits(t) || len(t) > 18 {
		return bad("no t=<Unix ms> second")
	}
	p.ts, _ = strconv.ParseInt(t, 10, 64) // 18 digits cannot overflow
	if n, ok = strings.CutPrefix(f[2], "n="); !ok || base64.RawURLEncoding.DecodedLen(len(n)) != nonceLen {
		return bad("no n=<nonce> third")
	}
	if k, err := base64.RawURLEncoding.Strict().Decode(p.nonce[:], []byte(n)); err != nil || k != nonceLen {
		return bad("the nonce is not %d bytes of base64url", nonceLen)
	}
	if to, ok = strings.CutPrefix(f[3], "to="); !ok {
		return bad("no to=<node> fourth")
	}
	var err error
	if p.target, err = url.PathUnescape(to); err != nil {
		return bad("the target is not percent-encoded")
	}
	if m, ok = strings.CutPrefix(f[4], "mac="); !ok || len(m) != 2*sha256.Size || strings.ToLower(m) != m {
		return bad("no mac=<%d lowercase hex digits> fifth", 2*sha256.Size)
	}
	if p.mac, err = hex.DecodeString(m); err != nil {
		return bad("the MAC is not hex")
	}
	return p, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// encodeChain percent-encodes each key (url.PathEscape escapes "," and
// "%", and every byte that is not a valid header byte) and joins them with
// ",". No chain is "".
func encodeChain(chain []string) string {
	var b strings.Builder
	for i, k := range chain {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(url.PathEscape(k))
	}
	return b.String()
}

// decodeChain reverses encodeChain. An empty key is refused: a key is
// never empty, and "" is no chain rather than a chain of one empty key.
func decodeChain(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	chain := make([]string, len(parts))
	for i, p := range parts {
		k, err := url.PathUnescape(p)
		if err != nil || k == "" {
			return nil, fmt.Errorf("%w (malformed %s: key %d is empty or not percent-encoded)", ErrBadSignature, ChainHeader, i+1)
		}
		chain[i] = k
	}
	return chain, nil
}

// sum is the call's MAC. Its input is a sequence of fields, each preceded
// by its length (8 bytes, big-endian), so no two calls give the same input
// whatever bytes their fields hold:
//
//	domain, target, app, method, path, SHA-256(body), caller,
//	the number of chain keys (8 bytes) and each key,
//	timestamp (Unix ms, 8 bytes), nonce,
//	and "take" for a take call only, so a plain call's input is as it
//	was before take calls (the nonce, of fixed length, ends it) and no
//	plain call's signature passes for a take's
func sum(key []byte, target, app, method, path string, bodyHash [sha256.Size]byte, caller string, chain []string, ts int64, nonce []byte, take bool) []byte {
	size := len(domain) + len(target) + len(app) + len(method) + len(path) + len(bodyHash) + len(caller) + len(nonce) + 10*8
	for _, k := range chain {
		size += 8 + len(k)
	}
	b := make([]byte, 0, size)
	str := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(domain)
	str(target)
	str(app)
	str(method)
	str(path)
	str(string(bodyHash[:]))
	str(caller)
	b = binary.BigEndian.AppendUint64(b, uint64(len(chain)))
	for _, k := range chain {
		str(k)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	str(string(nonce))
	if take {
		str("take")
	}
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}
