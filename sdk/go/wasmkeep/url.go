package wasmkeep

import (
	"errors"
	"strings"
)

// URL is the part of a request's URL an actor sees: the path after the
// actor's name, and the query. Its fields mean what net/url.URL's fields of
// the same names mean; net/url itself is not used because it would add
// about 1 MB to every actor.
type URL struct {
	Scheme   string // set only in a request for Fetch: "http" or "https"
	Host     string // set only in a request for Fetch: host or host:port
	Path     string // decoded: "/a b"
	RawPath  string // the encoded path, set only when it is not the default encoding of Path
	RawQuery string // encoded, without the "?"
}

// Values maps a query's keys to their values, as net/url.Values does.
type Values map[string][]string

// Get returns the first value of key, or "".
func (v Values) Get(key string) string {
	if vs := v[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Has reports whether key is present, even with an empty value.
func (v Values) Has(key string) bool {
	_, ok := v[key]
	return ok
}

// Query parses RawQuery. Malformed pairs are left out, as net/url's
// URL.Query does.
func (u *URL) Query() Values {
	v := Values{}
	for q := u.RawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, val, _ := strings.Cut(pair, "=")
		k, ok1 := unescape(k, true)
		val, ok2 := unescape(val, true)
		if pair != "" && ok1 && ok2 {
			v[k] = append(v[k], val)
		}
	}
	return v
}

// EscapedPath is the encoded form of Path: RawPath if it is a valid encoding
// of Path, otherwise Path with every byte that needs it percent-encoded.
func (u *URL) EscapedPath() string {
	if u.RawPath != "" {
		if p, ok := unescape(u.RawPath, false); ok && p == u.Path {
			return u.RawPath
		}
	}
	return escapePath(u.Path)
}

// RequestURI is the encoded path and query, as sent to an actor.
func (u *URL) RequestURI() string {
	s := u.EscapedPath()
	if s == "" {
		s = "/"
	}
	if u.RawQuery != "" {
		s += "?" + u.RawQuery
	}
	return s
}

var errBadPath = errors.New("wasmkeep: malformed path: it must start with / and its % escapes must be valid")

// parseURL splits an encoded path and query. An empty path is "/".
func parseURL(target string) (*URL, error) {
	raw, query, _ := strings.Cut(target, "?")
	if raw == "" {
		raw = "/"
	}
	path, ok := unescape(raw, false)
	if !ok || raw[0] != '/' {
		return nil, errBadPath
	}
	u := &URL{Path: path, RawQuery: query}
	if escapePath(path) != raw {
		u.RawPath = raw
	}
	return u, nil
}

// unescape decodes %XX escapes, and in a query also "+" as a space. It
// returns s itself when there is nothing to decode.
func unescape(s string, query bool) (string, bool) {
	escapes, plus := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", false
			}
			escapes++
			i += 2
		case '+':
			plus = plus || query
		}
	}
	if escapes == 0 && !plus {
		return s, true
	}
	b := make([]byte, 0, len(s)-2*escapes)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case c == '+' && query:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

// escapePath percent-encodes every byte of a path but the unreserved ones,
// the sub-delimiters, ":", "@" and "/" (RFC 3986 pchar).
func escapePath(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isPathByte(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; isPathByte(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func isPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
