// Package fetch is outbound HTTP's mechanism (http_fetch): the address
// policy (public addresses only, but for the ranges and ports the operator
// opens), the resolver, the step timeouts, the body caps and how a failure
// is classified for the guest. Reading the request from guest memory and
// writing the answer back is the host ABI's, not this package's.
package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/wasmkeep/wasmkeep/internal/fallbackroots"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// Resolver looks up a host name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// refusedPrefixes are the IANA special-purpose IPv4 blocks no guest may
// reach unless --allow-outbound opens them; IPv6 outside globalV6 is refused
// as a whole.
var refusedPrefixes = prefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	// Inside 2000::/3 but not global: IETF protocol assignments (Teredo
	// among them) and 6to4, which embed IPv4 addresses, and documentation.
	"2001::/23", "2002::/16", "2001:db8::/32", "3fff::/20",
)

var globalV6 = netip.MustParsePrefix("2000::/3")

// blockedPorts is the Fetch standard's list of bad ports
// (https://fetch.spec.whatwg.org/#port-blocking).
var blockedPorts = []int{
	1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95,
	101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161,
	179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563,
	587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060,
	5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
}

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// Options configure a node's outbound HTTP.
type Options struct {
	Allow    []netip.Prefix      // ranges guests may reach though they are not public
	Ports    []int               // ports guests may reach though the Fetch standard blocks them
	CAs      []*x509.Certificate // trusted besides the system roots (the main package's fallback ones where the system has none)
	Resolver Resolver            // [net.DefaultResolver]
	Max      int                 // requests in flight on the node
	Step     time.Duration       // for each step (connect, first byte, next byte) unless the guest asks
	MaxStep  time.Duration       // the longest step a guest may ask for
	MaxBody  int64               // request and response body, each
}

// Fetcher holds what every http_fetch of a node shares.
type Fetcher struct {
	allow    []netip.Prefix
	ports    []int // blocked ports that --allow-outbound-port opens
	resolver Resolver
	// tls is built at the first request, not at the node's start: reading
	// the system's roots (some 150 certificates, parsed twice on Debian's
	// layout) is tens of ms a start would otherwise wait for (issue 30).
	tls   func() *tls.Config
	slots chan struct{} // requests in flight on the node

	step, maxStep time.Duration // Options.Step and MaxStep
	maxBody       int64         // Options.MaxBody
}

// New returns a node's fetcher.
func New(opts Options) (*Fetcher, error) {
	for _, p := range opts.Ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("allowed outbound port %d is not a port (1-65535)", p)
		}
	}
	r := opts.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	return &Fetcher{
		allow: opts.Allow, ports: opts.Ports, resolver: r,
		tls:   sync.OnceValue(func() *tls.Config { return tlsConfig(opts.CAs) }),
		slots: make(chan struct{}, opts.Max),
		step:  opts.Step, maxStep: opts.MaxStep, maxBody: opts.MaxBody,
	}, nil
}

// tlsConfig trusts the system's roots (Mozilla's where the system has
// none) and cas.
func tlsConfig(cas []*x509.Certificate) *tls.Config {
	fallbackroots.Ensure()
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool() // not after Ensure, which sets the bundle where the system's roots fail
	}
	for _, c := range cas {
		roots.AddCert(c)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}

// permitted says whether a guest may connect to a.
func (f *Fetcher) permitted(a netip.Addr) bool {
	a = a.Unmap() // an IPv4-mapped address is checked as the IPv4 address it is
	for _, p := range f.allow {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is6() && !globalV6.Contains(a) {
		return false
	}
	for _, p := range refusedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// Error is an http_fetch failure the guest is told about.
type Error struct {
	Kind abi.FetchErrorKind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func fetchErr(kind abi.FetchErrorKind, format string, args ...any) *Error {
	return &Error{kind, fmt.Sprintf(format, args...)}
}

var errStepTimeout = errors.New("no byte arrived within the step timeout")

// Do checks and sends one request; step is the guest's step timeout (0
// for the node's). The per-actor limit of 16 in flight
// needs no count of its own: an actor runs one event at a time and fetch
// is synchronous, so an actor has at most one request in flight.
func (f *Fetcher) Do(ctx context.Context, req abi.Request, step time.Duration) (*abi.Response, *Error) {
	maxBody := f.maxBody
	switch {
	case step == 0:
		step = f.step
	case step > f.maxStep:
		step = f.maxStep
	}
	u, err := url.Parse(req.Path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return nil, fetchErr(abi.FetchInvalidRequest, "the URL must be absolute, http or https, with a host and no user info")
	}
	if int64(len(req.Body)) > maxBody {
		return nil, fetchErr(abi.FetchTooLarge, "the request body is larger than the %s limit", SizeText(maxBody))
	}
	hreq, err := http.NewRequest(req.Method, u.String(), nil)
	if err != nil {
		return nil, fetchErr(abi.FetchInvalidRequest, "invalid request: %v", err)
	}
	for _, h := range req.Headers {
		if !ValidHeader(h) {
			return nil, fetchErr(abi.FetchInvalidRequest, "invalid header %q", h.Name)
		}
		hreq.Header.Add(h.Name, h.Value)
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return nil, fetchErr(abi.FetchInvalidRequest, "invalid port %q", p)
		}
	}
	if slices.Contains(blockedPorts, port) && !slices.Contains(f.ports, port) {
		return nil, fetchErr(abi.FetchHTTPRequestDenied, "port %d is blocked (the Fetch standard's bad ports; --allow-outbound-port opens one)", port)
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		return nil, fetchErr(abi.FetchTooManyRequests, "the node has %d outbound requests in flight, its limit", cap(f.slots))
	}
	addrs, ferr := f.resolve(ctx, u.Hostname(), step)
	if ferr != nil {
		return nil, ferr
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	dialer := &net.Dialer{Timeout: step}
	tr := &http.Transport{ // no Proxy: one from the environment would bypass the checks
		// Only the checked addresses are dialled: the name is never
		// resolved again, so a DNS answer cannot change between check and use.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var last error
			for _, a := range addrs {
				c, err := dialer.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
				if err == nil {
					return c, nil
				}
				last = err
			}
			return nil, last
		},
		TLSClientConfig:       f.tls(),
		TLSHandshakeTimeout:   step,
		ResponseHeaderTimeout: step,
		DisableKeepAlives:     true,
		DisableCompression:    true, // the guest sees the body as the server sent it
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	hreq = hreq.WithContext(ctx)
	if len(req.Body) > 0 {
		hreq.Body = io.NopCloser(bytes.NewReader(req.Body))
		hreq.ContentLength = int64(len(req.Body))
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(&stepReader{r: resp.Body, step: step, cancel: cancel}, maxBody+1))
	if err != nil {
		return nil, classify(ctx, err)
	}
	if int64(len(body)) > maxBody {
		return nil, fetchErr(abi.FetchTooLarge, "the response body is larger than the %s limit", SizeText(maxBody))
	}
	out := &abi.Response{Status: resp.StatusCode, Body: body}
	names := make([]string, 0, len(resp.Header))
	for name := range resp.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range resp.Header[name] {
			out.Headers = append(out.Headers, abi.Header{Name: name, Value: v})
		}
	}
	return out, nil
}

// resolve returns the permitted addresses of host. A literal address that
// is refused says so; a name whose every address is refused fails like a
// name that does not resolve, so a guest cannot map the private network.
func (f *Fetcher) resolve(ctx context.Context, host string, step time.Duration) ([]netip.Addr, *Error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if !f.permitted(a) {
			return nil, fetchErr(abi.FetchDestinationIPProhibited, "%s is not a public address (--allow-outbound opens a range)", a)
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	// Outbound steps bound I/O with a real peer, whose own timers (dial,
	// TLS, net/http) are the wall clock's: so is this one, not the node's clock.
	ctx, cancel := context.WithTimeout(ctx, step)
	defer cancel()
	found, _ := f.resolver.LookupNetIP(ctx, "ip", host) // a refused answer and no answer read the same
	var addrs []netip.Addr
	for _, a := range found {
		if f.permitted(a) {
			addrs = append(addrs, a.Unmap())
		}
	}
	if len(addrs) == 0 {
		if ctx.Err() != nil {
			return nil, fetchErr(abi.FetchTimeout, "resolving %s timed out", host)
		}
		return nil, fetchErr(abi.FetchDNSError, "%s does not resolve to a public address", host)
	}
	return addrs, nil
}

// classify maps a transport error to an Error.
func classify(ctx context.Context, err error) *Error {
	var (
		unknownCA *x509.UnknownAuthorityError
		verify    *tls.CertificateVerificationError
		hostname  x509.HostnameError
		alert     tls.AlertError
		record    tls.RecordHeaderError
		netErr    net.Error
	)
	switch {
	case errors.Is(context.Cause(ctx), errStepTimeout):
		return fetchErr(abi.FetchTimeout, "the response stalled: %v", errStepTimeout)
	case ctx.Err() != nil:
		return fetchErr(abi.FetchTimeout, "the event's wall-clock limit ended the request")
	case errors.As(err, &unknownCA), errors.As(err, &verify), errors.As(err, &hostname), errors.As(err, &alert), errors.As(err, &record):
		return fetchErr(abi.FetchTLSError, "TLS: %v", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fetchErr(abi.FetchConnectionRefused, "connection refused")
	case errors.As(err, &netErr) && netErr.Timeout():
		return fetchErr(abi.FetchTimeout, "%v", err)
	}
	return fetchErr(abi.FetchFailed, "%v", err)
}

// stepReader fails the request when no byte arrives within step.
type stepReader struct {
	r      io.Reader
	step   time.Duration
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func (s *stepReader) Read(p []byte) (int, error) {
	if s.timer == nil { // the wall clock, as resolve's step says why
		s.timer = time.AfterFunc(s.step, func() { s.cancel(errStepTimeout) })
	} else {
		s.timer.Reset(s.step)
	}
	defer s.timer.Stop()
	return s.r.Read(p)
}

// ValidHeader reports whether h is a header field net/http would send: a
// request's here, and a guest's response too (the host ABI checks them
// alike).
func ValidHeader(h abi.Header) bool {
	return httpguts.ValidHeaderFieldName(h.Name) && httpguts.ValidHeaderFieldValue(h.Value)
}

// SizeText is a limit in bytes as the node's messages give it: in MB (of
// 2^20 bytes) when it is a whole number of them, as the defaults are.
func SizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
