package address

import (
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	for path, want := range map[string]Route{
		"/actor/chat/lobby":                       {"chat", "lobby", "/"},
		"/actor/chat/lobby/":                      {"chat", "lobby", "/"},
		"/actor/chat/room%201/history":            {"chat", "room 1", "/history"},
		"/actor/chat/lobby/a%2Fb/c":               {"chat", "lobby", "/a%2Fb/c"},
		"/actor/chat/%C3%A9t%C3%A9":               {"chat", "été", "/"},
		"/actor/chat/" + strings.Repeat("n", 256): {"chat", strings.Repeat("n", 256), "/"},
	} {
		got, ok, err := ParsePath(path)
		if !ok || err != nil || got != want {
			t.Errorf("%s: got %+v %v %v, want %+v", path, got, ok, err, want)
		}
	}
	for _, bad := range []string{"/actor/chat", "/actor//x", "/actor/chat/", "/actor/chat/.", "/actor/chat/%2E%2E",
		"/actor/chat/a%2Fb", "/actor/chat/a%0Ab", "/actor/chat/%zz", "/actor/chat/" + strings.Repeat("n", 257)} {
		if _, ok, err := ParsePath(bad); !ok || err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if _, ok, _ := ParsePath("/other"); ok {
		t.Error("/other is not an actor path")
	}
}

func TestValidIdent(t *testing.T) {
	for s, ok := range map[string]bool{"chat": true, "a-1": true, "": false, "1a": false, "Chat": false, "a_b": false, strings.Repeat("a", 65): false} {
		if ValidIdent(s) != ok {
			t.Errorf("ValidIdent(%q) = %v", s, !ok)
		}
	}
}

func TestEscapeTarget(t *testing.T) {
	for in, want := range map[string]string{
		"/actor/c/n/echo?x=1&y=a%20b": "/actor/c/n/echo?x=1&y=a%20b",
		"/echo/a b?c d":               "/echo/a%20b?c%20d",
		"/echo?t=\x01\x7f":            "/echo?t=%01%7F",
		"/é?%ZZ#f":                    "/é?%ZZ#f",
	} {
		if got := EscapeTarget(in); got != want {
			t.Errorf("EscapeTarget(%q) = %q, want %q", in, got, want)
		}
	}
}
