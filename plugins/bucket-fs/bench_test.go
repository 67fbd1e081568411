package fsbucket

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// BenchmarkPut: a durable 4 KiB write (the file and its directory fsynced),
// unconditional, creating, and replacing at the current version.
func BenchmarkPut(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 4<<10)
	for _, mode := range []string{"unconditional", "create", "replace"} {
		b.Run(mode, func(b *testing.B) {
			bk := openT(b, b.TempDir())
			ctx := b.Context()
			v := put(b, bk, "bench/replace", "first")
			b.SetBytes(int64(len(body)))
			i := 0
			for b.Loop() {
				key, cond := "bench/put", bucket.Condition{}
				switch mode {
				case "create":
					key, cond = fmt.Sprintf("bench/create-%d", i), bucket.Condition{IfAbsent: true}
				case "replace":
					key, cond = "bench/replace", bucket.Condition{IfVersion: v}
				}
				var err error
				if v, err = bk.Put(ctx, key, bytes.NewReader(body), int64(len(body)), cond); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkGet: a whole 4 KiB object read with its version.
func BenchmarkGet(b *testing.B) {
	bk := openT(b, b.TempDir())
	put(b, bk, "bench/get", string(bytes.Repeat([]byte("x"), 4<<10)))
	b.SetBytes(4 << 10)
	for b.Loop() {
		obj, err := bk.Get(b.Context(), "bench/get", bucket.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, obj.Body)
		obj.Body.Close()
	}
}

// BenchmarkList: one page of 1,000 entries out of a directory of 2,500
// keys (each entry's version read from its file).
func BenchmarkList(b *testing.B) {
	bk := openT(b, b.TempDir())
	for i := range 2500 {
		put(b, bk, fmt.Sprintf("bench/list/%05d", i), "v")
	}
	for b.Loop() {
		page, err := bk.List(b.Context(), "bench/list/", bucket.ListOptions{StartAfter: "bench/list/00500", Limit: 1000})
		if err != nil || len(page.Entries) != 1000 {
			b.Fatal(len(page.Entries), err)
		}
	}
}
