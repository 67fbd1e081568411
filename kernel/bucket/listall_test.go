package bucket_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// ListAll follows every page: more keys than one page holds come back
// each once, and only those under the prefix.
func TestListAll(t *testing.T) {
	ctx := t.Context()
	b := buckettest.NewMemory(buckettest.Flaws{})
	var want []string
	for i := range 2500 { // the memory bucket pages by 1,000
		key := fmt.Sprintf("a/%05d", i)
		want = append(want, key)
		if _, err := b.Put(ctx, key, strings.NewReader("x"), 1, bucket.Condition{IfAbsent: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "b/0", strings.NewReader("x"), 1, bucket.Condition{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	all, err := bucket.ListAll(ctx, b, "a/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range all {
		got = append(got, e.Key)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("ListAll returned %d keys, want %d", len(got), len(want))
	}
}

// pages is a Lister that answers from fixed pages, keyed by StartAfter.
type pages map[string]bucket.ListPage

func (p pages) List(_ context.Context, _ string, opts bucket.ListOptions) (bucket.ListPage, error) {
	return p[opts.StartAfter], nil
}

func keys(es []bucket.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

// A store that sends a key again on a later page (a listing that moved
// under a concurrent write) has it returned once, where it came first.
func TestListAllDropsDuplicates(t *testing.T) {
	l := pages{
		"":    {Entries: []bucket.Entry{{Key: "a/1"}, {Key: "a/2"}}, Next: "!t1"},
		"!t1": {Entries: []bucket.Entry{{Key: "a/2"}, {Key: "a/3"}, {Key: "a/3"}}},
	}
	all, err := bucket.ListAll(t.Context(), l, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(all), []string{"a/1", "a/2", "a/3"}; !slices.Equal(got, want) {
		t.Errorf("ListAll = %q, want %q", got, want)
	}
}

// A cursor that does not advance (a page naming itself, or one before it,
// as the next) is an error, not a listing that never ends.
func TestListAllStopsOnACursorThatDoesNotAdvance(t *testing.T) {
	for name, l := range map[string]pages{
		"itself": {
			"":    {Entries: []bucket.Entry{{Key: "a/1"}}, Next: "!t1"},
			"!t1": {Entries: []bucket.Entry{{Key: "a/2"}}, Next: "!t1"},
		},
		"a cycle": {
			"":    {Entries: []bucket.Entry{{Key: "a/1"}}, Next: "!t1"},
			"!t1": {Entries: []bucket.Entry{{Key: "a/2"}}, Next: "!t2"},
			"!t2": {Entries: []bucket.Entry{{Key: "a/3"}}, Next: "!t1"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := bucket.ListAll(t.Context(), l, "a/")
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "did not advance") {
					t.Errorf("ListAll: %v, want an error saying the cursor did not advance", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ListAll still listing after 10 s")
			}
		})
	}
}
