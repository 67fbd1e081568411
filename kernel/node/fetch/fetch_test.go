package fetch

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

func TestPermitted(t *testing.T) {
	f, err := New(Options{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "10.1.2.3": true,
		"10.2.0.1": false, "127.0.0.1": false, "::ffff:127.0.0.1": false, "169.254.169.254": false,
		"255.255.255.255": false, "::1": false, "fe80::1": false, "2002::1": false, "2001:db8::1": false,
	} {
		if got := f.permitted(netip.MustParseAddr(addr)); got != want {
			t.Errorf("permitted(%s) = %v, want %v", addr, got, want)
		}
	}
}

// What Do refuses before it sends anything, with the kind the guest gets.
func TestDoRefuses(t *testing.T) {
	f, err := New(Options{Ports: []int{6000}, Max: 1, Step: time.Second, MaxStep: time.Second, MaxBody: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  abi.Request
		kind abi.FetchErrorKind
		msg  string
	}{
		{abi.Request{Method: "GET", Path: "/relative"}, abi.FetchInvalidRequest, "absolute"},
		{abi.Request{Method: "GET", Path: "ftp://example.com/"}, abi.FetchInvalidRequest, "http or https"},
		{abi.Request{Method: "GET", Path: "http://u:p@example.com/"}, abi.FetchInvalidRequest, "no user info"},
		{abi.Request{Method: "GET", Path: "http://example.com:25/"}, abi.FetchHTTPRequestDenied, "port 25 is blocked"},
		{abi.Request{Method: "GET", Path: "http://127.0.0.1:6000/"}, abi.FetchDestinationIPProhibited, "not a public address"},
		{abi.Request{Method: "POST", Path: "http://example.com/", Body: make([]byte, 1<<20+1)}, abi.FetchTooLarge, "larger than the 1 MB limit"},
		{abi.Request{Method: "GET", Path: "http://example.com/", Headers: []abi.Header{{Name: "a b", Value: "x"}}}, abi.FetchInvalidRequest, "invalid header"},
	} {
		_, ferr := f.Do(context.Background(), c.req, 0)
		if ferr == nil || ferr.Kind != c.kind || !strings.Contains(ferr.Msg, c.msg) {
			t.Errorf("%s %s: %v, want kind %d with %q", c.req.Method, c.req.Path, ferr, c.kind, c.msg)
		}
	}
	if _, err := New(Options{Ports: []int{70000}}); err == nil {
		t.Error("port 70000 accepted")
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16 MB", 1 << 20: "1 MB", 1<<20 + 1: "1048577 bytes", 1000: "1000 bytes"} {
		if got := SizeText(n); got != want {
			t.Errorf("SizeText(%d) = %q, want %q", n, got, want)
		}
	}
}
