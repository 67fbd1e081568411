package fsbucket

import (
	"io"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// openT opens the bucket in dir, closed when the test ends.
func openT(t testing.TB, dir string) bucket.Bucket {
	t.Helper()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// readAll reads key's object whole.
func readAll(t testing.TB, b bucket.Bucket, key string) string {
	t.Helper()
	obj, err := b.Get(t.Context(), key, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	data, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// listKeys lists every key under prefix, page by page.
func listKeys(t testing.TB, b bucket.Bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for after := ""; ; {
		page, err := b.List(t.Context(), prefix, bucket.ListOptions{StartAfter: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			keys = append(keys, e.Key)
		}
		if page.Next == "" {
			return keys
		}
		after = page.Next
	}
}
