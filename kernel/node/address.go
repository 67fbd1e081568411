package node

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

// checkName applies the book's rule for actor names: 1 to 256 bytes of any
// text without / or control characters, other than . and ..
func checkName(name string) error {
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

// actorRoute is a request path split into class, name and what the actor
// sees.
type actorRoute struct {
	class, name string
	rest        string // path after the name, starting with /, escaped as received
}

// parseActorPath splits /actor/<class>/<name>[/<rest>] (escaped). ok is false
// when the path is not under /actor/; err says what is wrong with it.
func parseActorPath(escaped string) (r actorRoute, ok bool, err error) {
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
	if err := checkName(name); err != nil {
		return r, true, err
	}
	r = actorRoute{class: class, name: name, rest: "/"}
	if hasRest {
		r.rest = "/" + rest
	}
	return r, true, nil
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
