package bucket_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

func put(t *testing.T, b bucket.Bucket, key, body string) {
	t.Helper()
	if _, err := b.Put(t.Context(), key, strings.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// A view reads and writes under its root, lists only there with its keys
// relative to it, pages by keys relative to it, and leaves the shared
// bucket open when closed.
func TestUnder(t *testing.T) {
	ctx := t.Context()
	root := buckettest.NewMemory(buckettest.Flaws{})
	a := bucket.Under(root, "state/acme/a/")
	b := bucket.Under(root, "state/acme/b/")
	put(t, a, "owners/x", "A")
	put(t, b, "owners/x", "B")
	put(t, root, "state/acme/ab/owners/x", "neighbour") // shares a's root as a string, not as a directory
	put(t, root, "nodes/n1", "lease")

	o, err := a.Get(ctx, "owners/x", bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(o.Body)
	o.Body.Close()
	if string(data) != "A" {
		t.Errorf("a's owners/x = %q, want A", data)
	}
	if _, err := root.Get(ctx, "state/acme/b/owners/x", bucket.GetOptions{}); err != nil {
		t.Errorf("b's key is not under its root in the shared bucket: %v", err)
	}

	for i := range 5 {
		put(t, a, "actors/k"+string(rune('0'+i)), "x")
	}
	var got []string
	opts := bucket.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		page, err := a.List(ctx, "", opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, keys(page.Entries)...)
		if page.Next == "" {
			break
		}
		if strings.HasPrefix(page.Next, "state/") {
			t.Fatalf("Next %q is not relative to the root", page.Next)
		}
		opts.StartAfter = page.Next
	}
	want := []string{"actors/k0", "actors/k1", "actors/k2", "actors/k3", "actors/k4", "owners/x"}
	if !slices.Equal(got, want) {
		t.Errorf("paged listing of a = %q, want %q", got, want)
	}
	all, err := bucket.ListAll(ctx, a, "actors/")
	if err != nil || len(all) != 5 {
		t.Errorf("ListAll(a, actors/) = %d keys, %v; want 5", len(all), err)
	}
	page, err := a.List(ctx, "owners/", bucket.ListOptions{StartAfter: "owners/"})
	if err != nil || !slices.Equal(keys(page.Entries), []string{"owners/x"}) {
		t.Errorf("List after a key = %q, %v", keys(page.Entries), err)
	}

	if err := a.Delete(ctx, "owners/x", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "owners/x", bucket.GetOptions{}); err != nil {
		t.Errorf("deleting a's owners/x touched b's: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Get(ctx, "nodes/n1", bucket.GetOptions{}); err != nil {
		t.Errorf("closing a view closed the shared bucket: %v", err)
	}
}

// tokens is a bucket whose listing pages with a provider's token, and
// records the StartAfter and prefix each List was given.
type tokens struct {
	bucket.Bucket
	got []bucket.ListOptions
	pre []string
}

func (t *tokens) List(_ context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	t.got = append(t.got, opts)
	t.pre = append(t.pre, prefix)
	if opts.StartAfter == "" {
		return bucket.ListPage{Entries: []bucket.Entry{{Key: prefix + "1"}}, Next: bucket.CursorMark + "t1"}, nil
	}
	return bucket.ListPage{Entries: []bucket.Entry{{Key: prefix + "2"}}}, nil
}

// A provider's token passes through the view unchanged both ways.
func TestUnderPassesTokens(t *testing.T) {
	inner := &tokens{}
	v := bucket.Under(inner, "state/t/a/")
	all, err := bucket.ListAll(t.Context(), v, "actors/")
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(all); !slices.Equal(got, []string{"actors/1", "actors/2"}) {
		t.Errorf("keys %q", got)
	}
	if inner.got[1].StartAfter != "!t1" || inner.pre[0] != "state/t/a/actors/" {
		t.Errorf("inner saw StartAfter %q, prefix %q", inner.got[1].StartAfter, inner.pre[0])
	}
}

func TestUnderRefusesABadRoot(t *testing.T) {
	for _, root := range []string{"", "state/t/a", "state//a/"} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("Under(%q) did not panic", root)
				}
			}()
			bucket.Under(buckettest.NewMemory(buckettest.Flaws{}), root)
		}()
	}
}
