package processbucket

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// What the boundary costs: buckettest's memory bucket called through a
// provider process, and for small objects also in process.
func BenchmarkBoundary(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 20} {
		data := bytes.Repeat([]byte("x"), size)
		wheres := []string{"direct", "process"}
		if size > 1<<20 {
			wheres = wheres[1:] // the memory bucket's own cost would dominate
		}
		for _, where := range wheres {
			var bk bucket.Bucket = buckettest.NewMemory(buckettest.Flaws{})
			if where == "process" {
				p, err := Open(Config{Path: os.Args[0], Env: map[string]string{testProviderEnv: "v1"}, StartTimeout: 30 * time.Second}, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				bk = p
			}
			ctx := context.Background()
			name := where + "/" + sizeName(size)
			b.Run("put/"+name, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := bk.Put(ctx, "k", bytes.NewReader(data), int64(size), bucket.Condition{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("get/"+name, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					obj, err := bk.Get(ctx, "k", bucket.GetOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, obj.Body); err != nil {
						b.Fatal(err)
					}
					obj.Body.Close()
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}
