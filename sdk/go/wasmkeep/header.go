package wasmkeep

// Header holds HTTP header fields, keyed by canonical name as in net/http
// ("content-type" is stored as "Content-Type").
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[CanonicalHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key.
func (h Header) Values(key string) []string { return h[CanonicalHeaderKey(key)] }

// Set replaces the values of key with value.
func (h Header) Set(key, value string) { h[CanonicalHeaderKey(key)] = []string{value} }

// Add appends value to the values of key.
func (h Header) Add(key, value string) {
	key = CanonicalHeaderKey(key)
	h[key] = append(h[key], value)
}

// Del removes key.
func (h Header) Del(key string) { delete(h, CanonicalHeaderKey(key)) }

// CanonicalHeaderKey returns the canonical form of a header name, as
// net/http's function of the same name does: the first letter and every
// letter after a hyphen upper case, the rest lower case. A name holding a
// byte that is not valid in a header name is returned unchanged.
func CanonicalHeaderKey(s string) string {
	upper, change := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isTokenByte(c) {
			return s
		}
		change = change || upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z'
		upper = c == '-'
	}
	if !change {
		return s // already canonical: no allocation
	}
	return canonicalize(s)
}

func canonicalize(s string) string {
	b := []byte(s)
	upper := true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		} else if !upper && 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
	return string(b)
}

// isTokenByte reports whether c may appear in a header name (RFC 9110 tchar).
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
