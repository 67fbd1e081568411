package wasmkeep

import (
	"net/url"
	"slices"
	"testing"
)

func TestParseURLMatchesNetURL(t *testing.T) {
	for _, target := range []string{
		"/", "/history?limit=20", "/a%20b/c", "/a%2Fb", "/caf%C3%A9?x=1", "/a b", "/x?", "/~user/!$&'()*+,;=:@",
		"/%7Euser", "/a%3Fb?c=%3F",
	} {
		got, err := parseURL(target)
		if err != nil {
			t.Errorf("parseURL(%q): %v", target, err)
			continue
		}
		want, _ := url.ParseRequestURI(target)
		if got.Path != want.Path || got.RawQuery != want.RawQuery {
			t.Errorf("parseURL(%q) = %+v, net/url says Path %q RawQuery %q", target, *got, want.Path, want.RawQuery)
		}
		// The path an actor forwards is the one it received.
		if uri := got.RequestURI(); uri != target && uri+"?" != target {
			t.Errorf("parseURL(%q).RequestURI() = %q", target, uri)
		}
	}
}

func TestParseURLEmptyPathIsRoot(t *testing.T) {
	for _, target := range []string{"", "?who=alice"} {
		u, err := parseURL(target)
		if err != nil || u.Path != "/" {
			t.Errorf("parseURL(%q) = %+v, %v; want path /", target, u, err)
		}
	}
}

func TestParseURLRefusesMalformed(t *testing.T) {
	for _, target := range []string{"x", "/a%", "/a%2", "/a%zz"} {
		if u, err := parseURL(target); err == nil {
			t.Errorf("parseURL(%q) = %+v, want an error", target, *u)
		}
	}
}

func TestEscapedPath(t *testing.T) {
	for _, c := range []struct{ path, rawPath, want string }{
		{"/a b", "", "/a%20b"},
		{"/a/b", "/a%2Fb", "/a%2Fb"}, // RawPath keeps an encoded slash
		{"/c/d", "/a%2Fb", "/c/d"},   // a stale RawPath is ignored
		{"/100%", "", "/100%25"},
		{"/é?#", "", "/%C3%A9%3F%23"},
	} {
		u := &URL{Path: c.path, RawPath: c.rawPath}
		if got := u.EscapedPath(); got != c.want {
			t.Errorf("EscapedPath of %+v = %q, want %q", *u, got, c.want)
		}
		if want := (&url.URL{Path: c.path}).EscapedPath(); c.rawPath == "" && want != c.want {
			t.Errorf("net/url escapes %q as %q, this package as %q", c.path, want, c.want)
		}
	}
}

func TestQueryMatchesNetURL(t *testing.T) {
	for _, raw := range []string{
		"", "who=alice", "a=1&a=2&b", "x=a+b%26c&y=", "k%20ey=v%3Dw", "bad=%zz&ok=1", "&&a=1&", "=v",
	} {
		got := (&URL{RawQuery: raw}).Query()
		want, _ := url.ParseQuery(raw)
		if len(got) != len(want) {
			t.Errorf("Query(%q) = %v, net/url says %v", raw, got, want)
			continue
		}
		for k, vs := range want {
			if !slices.Equal(got[k], vs) {
				t.Errorf("Query(%q)[%q] = %q, net/url says %q", raw, k, got[k], vs)
			}
		}
	}
	q := (&URL{RawQuery: "a=&b=2"}).Query()
	if !q.Has("a") || q.Has("c") || q.Get("b") != "2" || q.Get("c") != "" {
		t.Errorf("Has/Get on %v", q)
	}
}
