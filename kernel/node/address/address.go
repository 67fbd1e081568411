// Package address owns the names of actors: what may name a class, a
// tenant or an actor (the book's rules), how a request path under /actor/
// names one, and how an actor's name is percent-encoded where text carries
// it (the caller header, messages). Every room reads and writes names
// through it, so there is one parser.
package address

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// identRE is the book's rule for class and tenant names.
var identRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)

// ValidIdent reports whether s may name a class or a tenant.
func ValidIdent(s string) bool { return identRE.MatchString(s) }

// CheckName applies the book's rule for actor names: 1 to 256 bytes of any
// text without / or control characters, other than . and ..
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("actor name is empty")
	case len(name) > 256:
		return fmt.Errorf("actor name is %d bytes long (at most 256)", len(name))
	case name == "." || name == "..":
		return fmt.Errorf("actor name %q is not allowed", name)
	}
	for _, c := range []byte(name) {
		if c == '/' {
			return fmt.Errorf("actor name %q contains /", name)
		}
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("actor name %q contains a control character", name)
		}
	}
	return nil
}

// Route is a request path split into class, name and what the actor sees.
type Route struct {
	Class, Name string
	Rest        string // path after the name, starting with /, escaped as received
}

// ParsePath splits /actor/<class>/<name>[/<rest>] (escaped). ok is false
// when the path is not under /actor/; err says what is wrong with it.
func ParsePath(escaped string) (r Route, ok bool, err error) {
	const prefix = "/actor/"
	if !strings.HasPrefix(escaped, prefix) {
		return r, false, nil
	}
	p := escaped[len(prefix):]
	class, p, found := strings.Cut(p, "/")
	if !found || class == "" {
		return r, true, fmt.Errorf("the path must be /actor/<class>/<name>")
	}
	rawName, rest, hasRest := strings.Cut(p, "/")
	name, uerr := url.PathUnescape(rawName)
	if uerr != nil {
		return r, true, fmt.Errorf("actor name %q is not valid percent-encoding", rawName)
	}
	if err := CheckName(name); err != nil {
		return r, true, err
	}
	r = Route{Class: class, Name: name, Rest: "/"}
	if hasRest {
		r.Rest = "/" + rest
	}
	return r, true, nil
}

// EscapeName percent-encodes every byte of an actor name but ASCII letters,
// digits and -._~, as the caller header carries it.
func EscapeName(name string) string {
	return percentEncode(name, func(c byte) bool { return isAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' })
}

// EscapeTarget percent-encodes the bytes an HTTP request line cannot
// carry (spaces and control characters) in a request target, leaving every
// other byte, a % included, as it is: a call's path sent to another node
// reaches the callee as it would on one node, once decoded.
func EscapeTarget(target string) string {
	return percentEncode(target, func(c byte) bool { return c > ' ' && c != 0x7f })
}

// percentEncode writes every byte of s that keep refuses as %XX.
func percentEncode(s string, keep func(byte) bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for _, c := range []byte(s) {
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
