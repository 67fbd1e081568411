package app

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	n, err := Parse("acme/shop-2")
	if err != nil || n != (Name{Tenant: "acme", App: "shop-2"}) || n.String() != "acme/shop-2" {
		t.Fatalf("Parse = %v, %v", n, err)
	}
	if n.StateRoot() != "state/acme/shop-2/" || n.DeployRoot() != "apps/acme/shop-2/" {
		t.Errorf("roots %q %q", n.StateRoot(), n.DeployRoot())
	}
	for in, want := range map[string]string{
		"acme":                            "write it tenant/app",
		"Acme/shop":                       `tenant "Acme" must match`,
		"acme/":                           `app name "" must match`,
		"acme/shop/x":                     `app name "shop/x" must match`,
		"1acme/shop":                      `tenant "1acme"`,
		"acme/" + strings.Repeat("a", 65): "must match [a-z][a-z0-9-]{0,63}",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", in, err, want)
		}
	}
}
