package bucket_test

import (
	"context"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Counting counts each request by operation and the book's four statuses.
func TestCounting(t *testing.T) {
	ctx := context.Background()
	counts := map[string]int{}
	b := bucket.Counting(buckettest.NewMemory(buckettest.Flaws{}), func(op, status string) { counts[op+" "+status]++ })
	b.Put(ctx, "k", strings.NewReader("x"), 1, bucket.Condition{IfAbsent: true})
	b.Put(ctx, "k", strings.NewReader("x"), 1, bucket.Condition{IfAbsent: true})
	b.Get(ctx, "absent", bucket.GetOptions{})
	b.Get(ctx, "k", bucket.GetOptions{Offset: 5})
	b.List(ctx, "", bucket.ListOptions{})
	b.Delete(ctx, "k", bucket.Condition{})
	want := map[string]int{"put ok": 1, "put precondition": 1, "get not_found": 1, "get error": 1, "list ok": 1, "delete ok": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}
