package deploys

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
)

// ListDeployed finds every app's current by its key's parts, whatever the
// listing order ("shop-a" lists before "shop/"), skips keys under
// versions, and keeps an unreadable current with an error naming its key.
func TestListDeployed(t *testing.T) {
	b := newBucket()
	if ds, err := ListDeployed(t.Context(), b); err != nil || len(ds) != 0 {
		t.Fatalf("empty bucket: %+v %v", ds, err)
	}
	before := time.Now()
	publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("1")}})
	r := publish(t, b, Draft{Classes: map[string][]byte{"a": []byte("2")}})
	shopA := app.Name{Tenant: "acme", App: "shop-a"}
	ra, err := Publish(t.Context(), b, shopA, Draft{Classes: map[string][]byte{"a": []byte("3")}})
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, b, "apps/acme/broken/current", "not a current\n")
	putRaw(t, b, "apps/Acme/x/current", r.To.String()+"\n")
	putRaw(t, b, "apps/acme/shop/"+r.To.Version+"/current", "a class's object, not a current")
	ds, err := ListDeployed(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s=%v,%v", d.App, d.Current, d.Err))
		if d.Err == nil && d.At.Before(before.Add(-time.Second)) {
			t.Errorf("%s: At %v, before the deploy", d.App, d.At)
		}
	}
	want := []string{
		`Acme/x= 0,apps/Acme/x/current: not under an app's root: app Acme/x: tenant "Acme" must match [a-z][a-z0-9-]{0,63}`,
		`acme/broken= 0,apps/acme/broken/current: not "<version> <seq>\n" (16 hex digits, a seq from 1)`,
		fmt.Sprintf("acme/shop=%s 2,<nil>", r.To.Version),
		fmt.Sprintf("acme/shop-a=%s 1,<nil>", ra.To.Version),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ListDeployed:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
