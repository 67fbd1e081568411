package deletes

import (
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

// A request's key reads back as the request, outcomes beside it are not
// requests, and a name too long for its key is refused.
func TestKeys(t *testing.T) {
	r, err := New(history.Actor{Tenant: "acme", Class: "cart", Name: "u 1ü"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ID) != 16 || !isHex(r.ID) {
		t.Fatalf("id %q", r.ID)
	}
	mem := buckettest.NewMemory(buckettest.Flaws{})
	if err := Write(t.Context(), mem, r); err != nil {
		t.Fatal(err)
	}
	if err := Write(t.Context(), mem, r); err == nil {
		t.Error("a request written twice under one id")
	}
	l, err := List(t.Context(), mem)
	if err != nil || len(l.Requests) != 1 {
		t.Fatalf("listed %v %v", l.Requests, err)
	}
	got := l.Requests[0]
	if got.Class != r.Class || got.Name != r.Name || got.ID != r.ID || got.At.IsZero() {
		t.Errorf("read back %+v, wrote %+v", got, r)
	}
	if err := Finish(t.Context(), mem, got, Done); err != nil {
		t.Fatal(err)
	}
	if st, o, err := Read(t.Context(), mem, got); err != nil || st != Ended || o != Done {
		t.Errorf("after Finish: %v %q %v", st, o, err)
	}
	if l, err := List(t.Context(), mem); err != nil || len(l.Requests) != 0 || len(l.Entries) != 1 {
		t.Errorf("after Finish, listed %v and %d objects (%v), want the outcome alone", l.Requests, len(l.Entries), err)
	}
	if _, err := New(history.Actor{Tenant: "acme", Class: "cart", Name: strings.Repeat("x", 250)}); err == nil {
		t.Error("a name whose key is shortened was taken")
	}
	if _, err := New(history.Actor{Tenant: "acme", Class: "Cart", Name: "x"}); err == nil {
		t.Error("a class that is no identifier was taken")
	}
}

// A request is carried out by a marker of itself or of a later request,
// never of an earlier one, and requests of one time are told apart by id:
// a marker keeps every id carried out at its time (two requests in one
// second both stay carried out), and only those. Fails with Marker
// keeping the last id alone.
func TestCarriedOutBy(t *testing.T) {
	at := time.Unix(1000, 0)
	r := Request{ID: "00000000000000aa", At: at}
	same := Request{ID: "00000000000000bb", At: at}
	later := Request{ID: "0000000000000001", At: at.Add(time.Second)}
	earlier := Request{ID: "00000000000000ff", At: at.Add(-time.Second)}
	for _, c := range []struct {
		marker string
		want   bool
	}{
		{"", false},
		{"garbage", false},
		{r.Marker(""), true},
		{later.Marker(""), true},
		{same.Marker(""), false},
		{earlier.Marker(""), false},
		{same.Marker(r.Marker("")), true},
		{r.Marker(same.Marker("")), true},
		{r.Marker(r.Marker("")), true},
		{same.Marker(earlier.Marker("")), false},
		{later.Marker(same.Marker(r.Marker(""))), true},
	} {
		if got := r.CarriedOutBy(c.marker); got != c.want {
			t.Errorf("CarriedOutBy(%q) = %v, want %v", c.marker, got, c.want)
		}
	}
	if got, want := same.Marker(r.Marker("")), r.Marker("")+" "+same.ID; got != want {
		t.Errorf("two of one time: %q, want %q", got, want)
	}
	if got, want := earlier.Marker(later.Marker("")), later.Marker(""); got != want {
		t.Errorf("an earlier request over a later marker: %q, want %q", got, want)
	}
	if got, want := later.Marker(same.Marker(r.Marker(""))), later.Marker(""); got != want {
		t.Errorf("a later request: %q, want %q", got, want)
	}
}
