package callsign

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

var start = time.UnixMilli(1_796_000_000_000) // a whole millisecond, as signatures carry

func testSecret(b byte) Secret { return Secret{key: bytes.Repeat([]byte{b}, secretLen)} }

// sample is a call with every field set, its chain holding the bytes the
// header encoding must carry: "," and "%", spaces, a newline, non-UTF-8.
func sample() Call {
	return Call{
		Target: "node-b",
		App:    "acme/shop",
		Method: "POST",
		Path:   "/actor/room/lobby%201?x=1&y=%2C",
		Body:   []byte(`{"say":"hi"}`),
		Caller: "default/room/kitchen%201",
		Chain:  []string{"default/room/kitchen 1", "default/a,b/c%d", "t/c/line\nbreak", "t/c/\xff\x00"},
	}
}

// signed signs c on a clock reading at and returns the headers.
func signed(s Secret, at time.Time, c Call) http.Header {
	h := http.Header{}
	NewSigner(s, clock.NewManual(at)).Sign(c, h)
	return h
}

// fixture is the sample call and a verifier for its target on a clock
// reading start, its record holding capacity nonces (0: the default).
func fixture(capacity int) (Call, *clock.Manual, *Verifier) {
	clk := clock.NewManual(start)
	return sample(), clk, NewVerifier(testSecret(1), "node-b", clk, capacity)
}

func verify(v *Verifier, c Call, h http.Header) (string, []string, error) {
	return v.Verify(c.Method, c.Path, c.Body, h)
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []Call{
		sample(),
		{Target: "a", Method: "GET", Path: "/"}, // no body, no caller, no chain
		{Target: "a", Method: "GET", Path: "/", Chain: []string{"x"}}, // one key
		{Target: "n", Method: "DELETE", Path: "/p", Body: []byte{0, 1}, // a binary body
			Caller: "t/c/n", Chain: []string{",", "%", "%2C", " "}},
	} {
		v := NewVerifier(testSecret(1), c.Target, clock.NewManual(start), 0)
		h := signed(testSecret(1), start, c)
		caller, chain, err := verify(v, c, h)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if caller != c.Caller || !slices.Equal(chain, c.Chain) {
			t.Errorf("got caller %q chain %q, want %q %q", caller, chain, c.Caller, c.Chain)
		}
		if len(c.Chain) == 0 && chain != nil {
			t.Errorf("no chain came back as %q", chain)
		}
		if got := h.Get(CallerHeader); got != c.Caller {
			t.Errorf("caller header %q, want %q", got, c.Caller)
		}
	}
}

// A signed call names its app; a node of another app, or a call naming
// none, is told apart before the body; an unsigned request is no call.
func TestOtherApp(t *testing.T) {
	h := signed(testSecret(1), start, sample())
	if h.Get(AppHeader) != "acme/shop" || OtherApp(h, "acme/shop") || !OtherApp(h, "acme/blog") {
		t.Errorf("app header %q: OtherApp(acme/shop) %v, OtherApp(acme/blog) %v", h.Get(AppHeader), OtherApp(h, "acme/shop"), OtherApp(h, "acme/blog"))
	}
	h.Del(AppHeader)
	if !OtherApp(h, "acme/shop") {
		t.Error("a signed call naming no app is this app's")
	}
	if OtherApp(http.Header{AppHeader: {"acme/blog"}}, "acme/shop") {
		t.Error("an unsigned request is taken for another app's call")
	}
}

// Every header a signed call carries is a valid HTTP field value, whatever
// the chain holds: a client would refuse to send it otherwise.
func TestHeadersAreSendable(t *testing.T) {
	for k, vs := range signed(testSecret(1), start, sample()) {
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] >= 0x7f {
					t.Errorf("%s: byte %#x at %d in %q", k, v[i], i, v)
				}
			}
		}
	}
}

// Each field the MAC covers, changed after signing, is refused; so is a
// malformed header, another secret, and a call for another node.
func TestTampered(t *testing.T) {
	sig := func(f func(string) string) func(*Call, http.Header) {
		return func(_ *Call, h http.Header) { h.Set(SignatureHeader, f(h.Get(SignatureHeader))) }
	}
	field := func(i int, f func(string) string) func(*Call, http.Header) {
		return sig(func(s string) string {
			fs := strings.Split(s, " ")
			fs[i] = f(fs[i])
			return strings.Join(fs, " ")
		})
	}
	flip := func(s string) string { // change the last character, keeping the alphabet
		b := []byte(s)
		switch b[len(b)-1] {
		case '0':
			b[len(b)-1] = '1'
		default:
			b[len(b)-1] = '0'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name   string
		change func(*Call, http.Header)
		detail string
	}{
		{"method", func(c *Call, _ http.Header) { c.Method = "PUT" }, "MAC"},
		{"path", func(c *Call, _ http.Header) { c.Path = "/actor/room/other" }, "MAC"},
		{"query", func(c *Call, _ http.Header) { c.Path += "&z=1" }, "MAC"},
		{"body", func(c *Call, _ http.Header) { c.Body = []byte(`{"say":"ho"}`) }, "MAC"},
		{"no body", func(c *Call, _ http.Header) { c.Body = nil }, "MAC"},
		{"app", func(_ *Call, h http.Header) { h.Set(AppHeader, "acme/blog") }, "MAC"},
		{"app removed", func(_ *Call, h http.Header) { h.Del(AppHeader) }, "MAC"},
		{"two apps", func(_ *Call, h http.Header) { h.Add(AppHeader, "acme/shop") }, "2 x-wasmkeep-app"},
		{"caller", func(_ *Call, h http.Header) { h.Set(CallerHeader, "default/admin/root") }, "MAC"},
		{"caller removed", func(_ *Call, h http.Header) { h.Del(CallerHeader) }, "MAC"},
		{"chain key", func(_ *Call, h http.Header) {
			h.Set(ChainHeader, strings.Replace(h.Get(ChainHeader), "kitchen", "kitchem", 1))
		}, "MAC"},
		{"chain key added", func(_ *Call, h http.Header) { h.Set(ChainHeader, h.Get(ChainHeader)+",t/c/x") }, "MAC"},
		{"chain key dropped", func(_ *Call, h http.Header) {
			h.Set(ChainHeader, h.Get(ChainHeader)[strings.Index(h.Get(ChainHeader), ",")+1:])
		}, "MAC"},
		{"chain reordered", func(_ *Call, h http.Header) {
			ks := strings.Split(h.Get(ChainHeader), ",")
			ks[0], ks[1] = ks[1], ks[0]
			h.Set(ChainHeader, strings.Join(ks, ","))
		}, "MAC"},
		{"chain removed", func(_ *Call, h http.Header) { h.Del(ChainHeader) }, "MAC"},
		{"chain with an empty key", func(_ *Call, h http.Header) { h.Set(ChainHeader, h.Get(ChainHeader)+",") }, "key 5"},
		{"chain not percent-encoded", func(_ *Call, h http.Header) { h.Set(ChainHeader, "a%zz") }, "key 1"},
		{"timestamp", field(1, flip), "MAC"},
		{"nonce", field(2, func(s string) string { // the first character: the last holds padding bits
			if s[2] == 'A' {
				return "n=B" + s[3:]
			}
			return "n=A" + s[3:]
		}), "MAC"},
		{"target", field(3, func(string) string { return "to=node-a" }), "MAC"},
		{"mac", field(4, flip), "MAC"},
		{"mac in upper case", field(4, strings.ToUpper), "lowercase"},
		{"mac short", field(4, func(s string) string { return s[:len(s)-2] }), "fifth"},
		{"another version", field(0, func(string) string { return "v2" }), "another version"},
		{"a field missing", sig(func(s string) string { return s[:strings.LastIndex(s, " ")] }), "4 fields"},
		{"a field more", sig(func(s string) string { return s + " x=1" }), "6 fields"},
		{"two spaces", sig(func(s string) string { return strings.Replace(s, " ", "  ", 1) }), "6 fields"},
		{"timestamp signed", field(1, func(s string) string { return "t=+" + s[2:] }), "t="},
		{"timestamp too long", field(1, func(s string) string { return "t=" + strings.Repeat("9", 19) }), "t="},
		{"nonce short", field(2, func(s string) string { return s[:len(s)-1] }), "n="},
		{"nonce padded", field(2, func(s string) string { return s + "==" }), "n="},
		{"nonce not base64url", field(2, func(s string) string { return s[:len(s)-1] + "+" }), "nonce"},
		{"target not percent-encoded", field(3, func(string) string { return "to=%zz" }), "target"},
		{"empty", sig(func(string) string { return "" }), "format"},
		{"two signatures", func(_ *Call, h http.Header) { h.Add(SignatureHeader, h.Get(SignatureHeader)) }, "2 x-wasmkeep-signature"},
		{"two callers", func(_ *Call, h http.Header) { h.Add(CallerHeader, "default/admin/root") }, "2 x-wasmkeep-caller"},
		{"two chains", func(_ *Call, h http.Header) { h.Add(ChainHeader, "") }, "2 x-wasmkeep-chain"},
		// A take marker cannot be added to a plain call (book ADR 0017: the
		// signature covers it).
		{"take added", func(_ *Call, h http.Header) { h.Set(TakeHeader, "1") }, "MAC"},
		{"take of another value", func(_ *Call, h http.Header) { h.Set(TakeHeader, "yes") }, "malformed x-wasmkeep-take"},
		{"two takes", func(_ *Call, h http.Header) { h.Add(TakeHeader, "1"); h.Add(TakeHeader, "1") }, "2 x-wasmkeep-take"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sample()
			h := signed(testSecret(1), start, c)
			tc.change(&c, h)
			v := NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0)
			_, _, err := verify(v, c, h)
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("%q does not say %q", err, tc.detail)
			}
			if v.Remembered() != 0 {
				t.Error("a refused signature was recorded")
			}
			// The same call untouched passes: the refusal was the change's.
			c, h = sample(), signed(testSecret(1), start, sample())
			if _, _, err := verify(v, c, h); err != nil {
				t.Fatalf("the untouched call: %v", err)
			}
		})
	}
}

// A take call verifies with its marker, which is then believed (Take),
// and fails once the marker is stripped: neither can be changed in
// transit.
func TestTakeMarker(t *testing.T) {
	c := sample()
	c.Take = true
	h := signed(testSecret(1), start, c)
	if !Take(h) {
		t.Fatalf("a take call's headers carry no %s: %v", TakeHeader, h)
	}
	if _, _, err := verify(NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0), c, h); err != nil {
		t.Fatalf("a take call: %v", err)
	}
	h = signed(testSecret(1), start, c)
	h.Del(TakeHeader)
	if _, _, err := verify(NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0), c, h); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a take call with its marker stripped: %v, want ErrBadSignature", err)
	}
	// Signing a plain call with headers a take left drops the marker.
	h = signed(testSecret(1), start, c)
	NewSigner(testSecret(1), clock.NewManual(start)).Sign(sample(), h)
	if Take(h) {
		t.Error("a plain call signed over a take's headers kept the marker")
	}
}

func TestWrongSecretOrTarget(t *testing.T) {
	c := sample()
	for _, tc := range []struct {
		name   string
		secret Secret
		self   string
		detail string
	}{
		{"another secret", testSecret(2), "node-b", "MAC does not match"},
		{"no secret", Secret{}, "node-b", "no cluster secret"},
		{"another node", testSecret(1), "node-a", `misaddressed: signed for node "node-b", this is "node-a"`},
	} {
		v := NewVerifier(tc.secret, tc.self, clock.NewManual(start), 0)
		_, _, err := verify(v, c, signed(testSecret(1), start, c))
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), tc.detail) {
			t.Errorf("%s: got %v, want ErrBadSignature saying %q", tc.name, err, tc.detail)
		}
		if !strings.HasPrefix(err.Error(), "bad, expired or misaddressed signature") {
			t.Errorf("%s: %q is not the book's message", tc.name, err)
		}
	}
}

func TestUnsigned(t *testing.T) {
	v := NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0)
	for _, h := range []http.Header{
		{},
		{"X-Wasmkeep-Caller": {"default/admin/root"}, "X-Wasmkeep-Chain": {"a"}}, // a client's, unsigned
	} {
		if _, _, err := v.Verify("GET", "/", nil, h); !errors.Is(err, ErrUnsigned) {
			t.Errorf("%v: got %v, want ErrUnsigned", h, err)
		}
	}
}

// The timestamp may be up to a minute from the receiver's clock either
// way, and no more.
func TestExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // signer's clock minus the verifier's
		ok   bool
	}{
		{"61 s old", -61 * time.Second, false},
		{"60.001 s old", -60*time.Second - time.Millisecond, false},
		{"60 s old", -60 * time.Second, true},
		{"59 s old", -59 * time.Second, true},
		{"now", 0, true},
		{"59 s ahead", 59 * time.Second, true},
		{"60 s ahead", 60 * time.Second, true},
		{"60.001 s ahead", 60*time.Second + time.Millisecond, false},
		{"61 s ahead", 61 * time.Second, false},
	} {
		c := sample()
		v := NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0)
		_, _, err := verify(v, c, signed(testSecret(1), start.Add(tc.skew), c))
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrExpired) {
			t.Errorf("%s: got %v, want ok %v (else ErrExpired)", tc.name, err, tc.ok)
		}
	}
	// A call that waited on the way: signed, then received 61 s later.
	c, clk, v := fixture(0)
	h := signed(testSecret(1), start, c)
	clk.Advance(61 * time.Second)
	if _, _, err := verify(v, c, h); !errors.Is(err, ErrExpired) {
		t.Errorf("received 61 s after signing: %v, want ErrExpired", err)
	}
}

func TestReplay(t *testing.T) {
	c, clk, v := fixture(0)
	h := signed(testSecret(1), start, c)
	if _, _, err := verify(v, c, h); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	if _, _, err := verify(v, c, h); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a replay: %v, want ErrReplayed", err)
	}
	// The same call signed again is another send, with a nonce of its own.
	if _, _, err := verify(v, c, signed(testSecret(1), clk.Now(), c)); err != nil {
		t.Fatalf("the same call signed again: %v", err)
	}
	// Spend records a signature: the copy is then refused.
	h = signed(testSecret(1), clk.Now(), c)
	if err := v.Spend(c.Method, c.Path, c.Body, h); err != nil {
		t.Fatal(err)
	}
	if _, _, err := verify(v, c, h); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a spent signature: %v, want ErrReplayed", err)
	}
	if err := v.Spend(c.Method, c.Path, c.Body, h); !errors.Is(err, ErrReplayed) {
		t.Fatalf("spent twice: %v, want ErrReplayed", err)
	}
}

// Each nonce is kept until its timestamp + one minute has passed, then
// forgotten: its copy is refused as expired, and the record shrinks.
func TestForget(t *testing.T) {
	c, clk, v := fixture(0)
	first := signed(testSecret(1), start, c)
	for _, h := range []http.Header{first, signed(testSecret(1), start, c), signed(testSecret(1), start, c)} {
		if _, _, err := verify(v, c, h); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(30 * time.Second)
	ahead := signed(testSecret(1), clk.Now().Add(50*time.Second), c) // a signer 50 s ahead: kept until 80 + 60 s
	for _, h := range []http.Header{signed(testSecret(1), clk.Now(), c), ahead} {
		if _, _, err := verify(v, c, h); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.Remembered(); n != 5 {
		t.Fatalf("%d nonces remembered, want 5", n)
	}
	clk.Advance(30 * time.Second) // 60 s: the first three are still valid
	if n := v.Remembered(); n != 5 {
		t.Fatalf("at 60 s: %d nonces remembered, want 5", n)
	}
	clk.Advance(time.Millisecond)
	if n := v.Remembered(); n != 2 {
		t.Fatalf("at 60.001 s: %d nonces remembered, want 2", n)
	}
	if _, _, err := verify(v, c, first); !errors.Is(err, ErrExpired) {
		t.Fatalf("a forgotten nonce's copy: %v, want ErrExpired", err)
	}
	clk.Advance(70 * time.Second) // 130 s: the one signed at 30 s is gone, the one dated 80 s not
	if n := v.Remembered(); n != 1 {
		t.Fatalf("at 130 s: %d nonces remembered, want 1", n)
	}
	if _, _, err := verify(v, c, ahead); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a replay of a call signed ahead: %v, want ErrReplayed", err)
	}
	clk.Advance(10 * time.Second)
	if n := v.Remembered(); n != 0 {
		t.Fatalf("at 140.001 s: %d nonces remembered, want 0", n)
	}
}

// A full record refuses calls rather than forget a valid nonce, and takes
// them again once nonces expire.
func TestFull(t *testing.T) {
	c, clk, v := fixture(2)
	for range 2 {
		if _, _, err := verify(v, c, signed(testSecret(1), clk.Now(), c)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(30 * time.Second)
	late := signed(testSecret(1), clk.Now(), c)
	for range 2 { // refused, not recorded: refused again the same way
		if _, _, err := verify(v, c, late); !errors.Is(err, ErrReplayFull) {
			t.Fatalf("a third call with room for two: %v, want ErrReplayFull", err)
		}
	}
	clk.Advance(31 * time.Second)
	if _, _, err := verify(v, c, late); err != nil {
		t.Fatalf("the third call once the first two expired: %v", err)
	}
	if n := v.Remembered(); n != 1 {
		t.Errorf("%d nonces remembered, want 1", n)
	}
}

// steppable is a clock a test sets, backwards too.
type steppable struct {
	clock.Clock
	mu  sync.Mutex
	now time.Time
}

func (s *steppable) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *steppable) set(t time.Time) {
	s.mu.Lock()
	s.now = t
	s.mu.Unlock()
}

// A clock stepped back does not bring a forgotten nonce back to life: its
// copy is still refused, as expired at the latest time the record saw.
func TestClockSteppedBack(t *testing.T) {
	c := sample()
	clk := &steppable{now: start}
	v := NewVerifier(testSecret(1), "node-b", clk, 0)
	h := signed(testSecret(1), start, c)
	if _, _, err := verify(v, c, h); err != nil {
		t.Fatal(err)
	}
	clk.set(start.Add(61 * time.Second))
	if n := v.Remembered(); n != 0 {
		t.Fatalf("%d nonces remembered at 61 s, want 0", n)
	}
	clk.set(start.Add(30 * time.Second))
	if _, _, err := verify(v, c, h); !errors.Is(err, ErrExpired) {
		t.Fatalf("the copy after the clock went back: %v, want ErrExpired", err)
	}
}

// Of many receivers of one signed call at once, exactly one accepts it.
func TestConcurrentReplay(t *testing.T) {
	c := sample()
	v := NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0)
	h := signed(testSecret(1), start, c)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, replayed := 0, 0
	for range 16 {
		wg.Go(func() {
			hc := h.Clone()
			_, _, err := verify(v, c, hc)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, ErrReplayed):
				replayed++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if accepted != 1 || replayed != 15 {
		t.Errorf("%d accepted, %d replayed; want 1 and 15", accepted, replayed)
	}
}

func TestStrip(t *testing.T) {
	h := signed(testSecret(1), start, sample())
	h["x-wasmkeep-forwarded"] = []string{"1"} // not in canonical form
	h["X-WASMKEEP-NODE"] = []string{"a"}
	h.Set("X-Wasmkeep", "not ours: no dash after it")
	h.Set("Content-Type", "text/plain")
	h.Set("X-Other", "kept")
	Strip(h)
	want := []string{"Content-Type", "X-Other", "X-Wasmkeep"}
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(got, want) {
		t.Errorf("left %q, want %q", got, want)
	}
}

// A Secret never prints its key.
func TestSecretHidden(t *testing.T) {
	s := testSecret(0xab)
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%d", "%q"} {
		out := fmt.Sprintf(f, s) + fmt.Sprintf(f, &s) + fmt.Sprintf(f, []Secret{s})
		if strings.Contains(strings.ToLower(out), "abab") || strings.Contains(out, "171") {
			t.Errorf("%s prints the key: %s", f, out)
		}
	}
}

// FuzzVerify: Verify on any headers and request never panics, and accepts
// only the call that was signed, exactly (the MAC covers each field that
// is believed or acted on).
func FuzzVerify(f *testing.F) {
	c := sample()
	h := signed(testSecret(1), start, c)
	f.Add(c.Method, c.Path, c.Body, h.Get(SignatureHeader), h.Get(CallerHeader), h.Get(ChainHeader))
	f.Add("GET", "/", []byte(nil), "v1 t=1 n=AAAAAAAAAAAAAAAAAAAAAA to=node-b mac="+strings.Repeat("0", 64), "", "")
	f.Add("", "", []byte{}, "v1 t= n= to= mac=", "a", "%,%%,,")
	f.Fuzz(func(t *testing.T, method, path string, body []byte, sig, caller, chain string) {
		v := NewVerifier(testSecret(1), "node-b", clock.NewManual(start), 0)
		gotCaller, gotChain, err := v.Verify(method, path, body, http.Header{
			"X-Wasmkeep-Signature": {sig}, "X-Wasmkeep-Caller": {caller}, "X-Wasmkeep-Chain": {chain}})
		if err != nil {
			return
		}
		if method != c.Method || path != c.Path || !bytes.Equal(body, c.Body) ||
			gotCaller != c.Caller || !slices.Equal(gotChain, c.Chain) {
			t.Fatalf("accepted %q %q %q from %q %q %q", method, path, body, sig, caller, chain)
		}
	})
}

func BenchmarkSignVerify(b *testing.B) {
	c := sample()
	c.Body = bytes.Repeat([]byte("x"), 1<<10)
	clk := clock.NewManual(start)
	s, v := NewSigner(testSecret(1), clk), NewVerifier(testSecret(1), "node-b", clk, 0)
	b.ReportAllocs()
	for b.Loop() {
		h := http.Header{}
		s.Sign(c, h)
		if _, _, err := verify(v, c, h); err != nil {
			b.Fatal(err)
		}
		clk.Advance(time.Millisecond) // nonces expire as they would at 1,000 calls a second
	}
}
