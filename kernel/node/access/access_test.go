package access

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Access{
		"open":                     {Mode: Open},
		"existing":                 {Mode: Existing},
		"internal":                 {Mode: Internal},
		"existing:main":            {Mode: Existing, Create: []string{"main"}},
		"existing:main,admin":      {Mode: Existing, Create: []string{"admin", "main"}},
		"existing:room 1,a,room 1": {Mode: Existing, Create: []string{"a", "room 1"}},
	} {
		got, err := Parse(in)
		if err != nil || got.Mode != want.Mode || !slices.Equal(got.Create, want.Create) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                `unknown access mode "" (valid: open, existing, existing:NAME,... or internal)`,
		"Existing":        `unknown access mode "Existing"`,
		"closed":          `unknown access mode "closed"`,
		"existing:":       `access mode "existing:": actor name is empty`,
		"existing:a,,b":   `access mode "existing:a,,b": actor name is empty`,
		"existing:a/b":    `contains /`,
		"existing:..":     `actor name ".." is not allowed`,
		"existing:a\x01b": `contains a control character`,
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want an error containing %q", in, err, want)
		}
	}
}

func TestAccessStringRoundTrips(t *testing.T) {
	for _, s := range []string{"open", "existing", "internal", "existing:admin,main"} {
		a, err := Parse(s)
		if err != nil || a.String() != s {
			t.Errorf("Parse(%q).String() = %q, %v", s, a.String(), err)
		}
	}
	if (Access{}).String() != "open" {
		t.Error("the zero Access is not open")
	}
}

func TestAllowsCreate(t *testing.T) {
	hub := Access{Mode: Existing, Create: []string{"admin", "main"}}
	for _, c := range []struct {
		a    Access
		name string
		want bool
	}{
		{Access{}, "anything", true},
		{Access{Mode: Existing}, "main", false},
		{hub, "main", true},
		{hub, "admin", true},
		{hub, "mainx", false},
		{Access{Mode: Internal, Create: []string{"main"}}, "main", false},
	} {
		if got := c.a.AllowsCreate(c.name); got != c.want {
			t.Errorf("%v AllowsCreate(%q) = %v, want %v", c.a, c.name, got, c.want)
		}
	}
}
