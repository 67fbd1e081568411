package wasmkeep

import (
	"net/textproto"
	"slices"
	"testing"
)

func TestCanonicalHeaderKeyMatchesNetHTTP(t *testing.T) {
	for _, k := range []string{
		"", "a", "A", "content-type", "Content-Type", "CONTENT-TYPE", "x-wasmkeep-caller",
		"www-AUTHENTICATE", "x-1a-b", "-x", "x--y", "foo bar", "foo:bar", "é-x", "a_b", "Accept-Encoding",
	} {
		if got, want := CanonicalHeaderKey(k), textproto.CanonicalMIMEHeaderKey(k); got != want {
			t.Errorf("CanonicalHeaderKey(%q) = %q, net/textproto says %q", k, got, want)
		}
	}
}

func TestCanonicalHeaderKeyKeepsCanonicalString(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { CanonicalHeaderKey("Content-Type") }); n != 0 {
		t.Errorf("canonical key allocated %v times", n)
	}
}

func TestHeaderIsCaseInsensitive(t *testing.T) {
	h := Header{}
	h.Add("x-test", "1")
	h.Add("X-TEST", "2")
	if got := h.Values("X-Test"); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("Values = %q", got)
	}
	if got := h.Get("x-tEST"); got != "1" {
		t.Errorf("Get = %q", got)
	}
	h.Set("x-test", "3")
	if got := h["X-Test"]; !slices.Equal(got, []string{"3"}) {
		t.Errorf("after Set: %q", got)
	}
	h.Del("X-test")
	if len(h) != 0 || h.Get("x-test") != "" {
		t.Errorf("after Del: %v", h)
	}
}
