package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// fakeDNS answers from a map, so no test depends on the machine's DNS.
type fakeDNS map[string][]netip.Addr

func (d fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := d[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var testDNS = fakeDNS{
	"public.example":     {netip.MustParseAddr("127.0.0.1")},
	"documentation.test": {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// fetch asks actor name to fetch u (with a per-step timeout in ms, 0 for
// the default), and returns what it answered.
func fetch(n *testNode, name, u string, timeoutMS int) string {
	n.t.Helper()
	_, body := n.do("GET", fmt.Sprintf("/actor/probe/%s/fetch?url=%s&timeout=%d", name, url.QueryEscape(u), timeoutMS), "")
	return body
}

func fetchNode(t *testing.T, opts node.Options) *testNode {
	opts.Classes = map[string]string{"probe": probe(t)}
	if opts.Resolver == nil {
		opts.Resolver = testDNS
	}
	return startNode(t, opts)
}

func TestFetchReachesLoopbackOnlyWhenAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "hello %s", r.URL.RequestURI())
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	closed := fetchNode(t, node.Options{})
	if got := fetch(closed, "a", srv.URL+"/x", 0); !strings.HasPrefix(got, "fetch-error destination-ip-prohibited: 127.0.0.1 is not a public address") {
		t.Errorf("loopback, not allowed: %q", got)
	}
	// A name resolving only to refused addresses reads like one that does not resolve.
	refused := fetch(closed, "a", fmt.Sprintf("http://public.example:%d/", port), 0)
	missing := fetch(closed, "a", fmt.Sprintf("http://nowhere.example:%d/", port), 0)
	if !strings.HasPrefix(refused, "fetch-error dns-error: public.example ") || !strings.HasPrefix(missing, "fetch-error dns-error: nowhere.example ") ||
		strings.TrimPrefix(refused, "fetch-error dns-error: public.example") != strings.TrimPrefix(missing, "fetch-error dns-error: nowhere.example") {
		t.Errorf("refused name %q and missing name %q should fail alike", refused, missing)
	}

	open := fetchNode(t, node.Options{AllowOutbound: loopback})
	if got := fetch(open, "a", srv.URL+"/x?y=1", 0); got != "200 hello /x?y=1" {
		t.Errorf("loopback, allowed: %q", got)
	}
	if got := fetch(open, "a", fmt.Sprintf("http://public.example:%d/named", port), 0); got != "200 hello /named" {
		t.Errorf("name of an allowed address: %q", got)
	}
	// Redirects are not followed: the guest gets the 3xx.
	if got := fetch(open, "a", srv.URL+"/moved", 0); !strings.HasPrefix(got, "302 ") {
		t.Errorf("redirect: %q", got)
	}
	for u, want := range map[string]string{
		"ftp://example.com/":             "bad-url: wasmkeep: a fetch URL must be absolute",
		"/relative":                      "bad-url: wasmkeep: a fetch URL must be absolute",
		"http://user:pw@public.example/": "fetch-error invalid-request:",
		"http://public.example:x/":       "fetch-error invalid-request:",
	} {
		if got := fetch(open, "a", u, 0); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %s", u, got, want)
		}
	}
}

func TestFetchRefusesSpecialAddresses(t *testing.T) {
	n := fetchNode(t, node.Options{})
	// Every address is refused before any dial, so nothing leaves the machine.
	for _, host := range []string{
		"0.0.0.1", "10.0.0.1", "100.64.0.1", "127.0.0.1", "169.254.169.254", "172.16.0.1",
		"192.0.0.1", "192.0.2.1", "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.51.100.1",
		"203.0.113.1", "224.0.0.1", "240.0.0.1", "255.255.255.255",
		"[::]", "[::1]", "[fe80::1]", "[fc00::1]", "[ff02::1]", "[2001:db8::1]", "[2002:a00:1::1]",
		"[::ffff:127.0.0.1]", "[::ffff:10.0.0.1]", "[64:ff9b::a00:1]",
	} {
		if got := fetch(n, "a", "http://"+host+":8080/", 0); !strings.HasPrefix(got, "fetch-error destination-ip-prohibited:") {
			t.Errorf("%s: %q", host, got)
		}
	}
	if got := fetch(n, "a", "http://documentation.test:8080/", 0); !strings.HasPrefix(got, "fetch-error dns-error:") {
		t.Errorf("a name with only documentation addresses: %q", got)
	}
}

func TestFetchRefusesBlockedPorts(t *testing.T) {
	n := fetchNode(t, node.Options{})
	for _, p := range []int{
		1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95,
		101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161,
		179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563,
		587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060,
		5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
	} {
		// The port is refused before the name is resolved (else the answer
		// would be dns-error), so no connection is tried.
		if got := fetch(n, "a", fmt.Sprintf("http://documentation.test:%d/", p), 0); !strings.HasPrefix(got, "fetch-error HTTP-request-denied:") {
			t.Errorf("port %d: %q", p, got)
		}
	}

	// --allow-outbound-port opens one: serve on a blocked port if one is free.
	var l net.Listener
	for _, p := range []int{6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080} {
		var err error
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			break
		}
	}
	if l == nil {
		t.Skip("no blocked port is free on 127.0.0.1")
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}}
	srv.Start()
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if got := fetch(fetchNode(t, node.Options{AllowOutbound: loopback}), "a", srv.URL, 0); !strings.HasPrefix(got, "fetch-error HTTP-request-denied:") {
		t.Errorf("blocked port %d, not allowed: %q", port, got)
	}
	if got := fetch(fetchNode(t, node.Options{AllowOutbound: loopback, AllowOutboundPorts: []int{port}}), "a", srv.URL, 0); got != "200 ok" {
		t.Errorf("blocked port %d, allowed: %q", port, got)
	}
}

func TestFetchTrustsAPrivateCAOnlyWhenGiven(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure") }))
	defer srv.Close()
	if got := fetch(fetchNode(t, node.Options{AllowOutbound: loopback}), "a", srv.URL, 0); !strings.HasPrefix(got, "fetch-error tls-error:") {
		t.Errorf("private CA, not trusted: %q", got)
	}
	trusted := fetchNode(t, node.Options{AllowOutbound: loopback, OutboundCAs: []*x509.Certificate{srv.Certificate()}})
	if got := fetch(trusted, "a", srv.URL, 0); got != "200 secure" {
		t.Errorf("private CA, trusted: %q", got)
	}
	// TLS is verified against the URL's host, which the certificate does not name.
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	if got := fetch(trusted, "a", fmt.Sprintf("https://public.example:%d/", port), 0); !strings.HasPrefix(got, "fetch-error tls-error:") {
		t.Errorf("certificate for another host: %q", got)
	}
}

// stallingServer answers after headers with nothing more (or, at
// /no-headers, with nothing at all) until the client goes away.
func stallingServer(t *testing.T) (*httptest.Server, chan struct{}) {
	arrived := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if r.URL.Path != "/no-headers" {
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(200)
			w.Write([]byte("abc"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, arrived
}

func TestFetchStepTimeouts(t *testing.T) {
	srv, _ := stallingServer(t)
	n := fetchNode(t, node.Options{AllowOutbound: loopback})
	for _, path := range []string{"/no-headers", "/stalls"} {
		start := time.Now()
		if got := fetch(n, "a", srv.URL+path, 200); !strings.HasPrefix(got, "fetch-error timeout:") {
			t.Errorf("%s: %q", path, got)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: the 200 ms step timeout took %v", path, d)
		}
	}
}

func TestFetchNodeLimit(t *testing.T) {
	// An actor has one fetch in flight at most (one event at a time, and
	// fetch is synchronous), so the node's limit is the one to test.
	srv, arrived := stallingServer(t)
	n := fetchNode(t, node.Options{AllowOutbound: loopback, MaxFetches: 1})
	done := make(chan string, 1)
	go func() { done <- fetch(n, "a", srv.URL+"/no-headers", 2000) }()
	<-arrived
	if got := fetch(n, "b", srv.URL, 0); !strings.HasPrefix(got, "fetch-error too-many-requests:") {
		t.Errorf("second fetch on the node: %q", got)
	}
	if got := <-done; !strings.HasPrefix(got, "fetch-error timeout:") {
		t.Errorf("first fetch: %q", got)
	}
	if got := fetch(n, "b", srv.URL+"/no-headers", 100); !strings.HasPrefix(got, "fetch-error timeout:") {
		t.Errorf("after the first ended, a fetch is let through: %q", got)
	}
}
