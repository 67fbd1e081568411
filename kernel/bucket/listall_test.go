package bucket_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

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
