// Package bucketbench measures what the kernel will pay a bucket provider:
// the latency of a conditional create (a replicated segment), a conditional
// replace (a lease or an ownership record), a read, and a listing. Run takes
// any bucket.Bucket, so every provider is measured by the same code; see
// providers_test.go for the providers and bench/README.md for results.
package bucketbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Sizes are the object sizes measured: a lease record, a typical segment,
// and a large segment or a snapshot chunk.
var Sizes = []int{256, 4 << 10, 1 << 20}

// ListKeys is how many keys the listing benchmarks list, in pages of
// ListPage (S3's page size).
const (
	ListKeys = 2000
	ListPage = 1000
)

// Run measures bk as sub-benchmarks: Create, Replace and Get at each of
// Sizes, and List (a page of 1000 keys out of 2000). Besides ns/op, each
// reports its median and 99th percentile latency (p50-ms, p99-ms). Objects
// go under a prefix of their own, deleted at the end.
func Run(b *testing.B, bk bucket.Bucket) {
	ctx := context.Background()
	prefix := buckettest.NewPrefix("bucketbench/")
	b.Cleanup(func() {
		if err := buckettest.DeleteAll(ctx, bk, prefix); err != nil {
			b.Error(err)
		}
	})
	for _, size := range Sizes {
		data := bytes.Repeat([]byte("w"), size)
		name := sizeName(size)
		// Numbered across the runs of -count; each object is deleted, off
		// the clock, once created.
		created := 0
		b.Run("Create/"+name, func(b *testing.B) {
			var key string
			measure(b, size, func() error {
				created++
				key = fmt.Sprintf("%screate-%s/%08d", prefix, name, created)
				_, err := bk.Put(ctx, key, bytes.NewReader(data), int64(size), bucket.Condition{IfAbsent: true})
				return err
			}, func() error { return bk.Delete(ctx, key, bucket.Condition{}) })
		})
		key := prefix + "replace-" + name
		v, err := bk.Put(ctx, key, bytes.NewReader(data), int64(size), bucket.Condition{IfAbsent: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("Replace/"+name, func(b *testing.B) {
			// Each write differs, as the kernel's do (a hashed ETag repeats
			// for the same bytes).
			body := slices.Clone(data)
			n := 0
			measure(b, size, func() error {
				n++
				copy(body, fmt.Sprintf("%08d", n%100000000)[:min(8, size)])
				var err error
				v, err = bk.Put(ctx, key, bytes.NewReader(body), int64(size), bucket.Condition{IfVersion: v})
				return err
			}, nil)
		})
		b.Run("Get/"+name, func(b *testing.B) {
			measure(b, size, func() error {
				obj, err := bk.Get(ctx, key, bucket.GetOptions{})
				if err != nil {
					return err
				}
				defer obj.Body.Close()
				if n, err := io.Copy(io.Discard, obj.Body); err != nil || n != int64(size) {
					return fmt.Errorf("read %d of %d bytes: %v", n, size, err)
				}
				return nil
			}, nil)
		})
	}
	list := prefix + "list/"
	for i := range ListKeys {
		if _, err := bk.Put(ctx, fmt.Sprintf("%s%06d", list, i), bytes.NewReader(nil), 0, bucket.Condition{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run(fmt.Sprintf("List/%d-of-%d", ListPage, ListKeys), func(b *testing.B) {
		measure(b, 0, func() error {
			page, err := bk.List(ctx, list, bucket.ListOptions{Limit: ListPage})
			if err == nil && len(page.Entries) != ListPage {
				err = fmt.Errorf("a page of %d entries, want %d", len(page.Entries), ListPage)
			}
			return err
		}, nil)
	})
}

// measure runs op b.N times, timing each call, and reports the median and
// the 99th percentile besides the mean; after, if not nil, runs after each
// op with the clock stopped.
func measure(b *testing.B, size int, op, after func() error) {
	if size > 0 {
		b.SetBytes(int64(size))
	}
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		if after != nil {
			b.StopTimer()
			if err := after(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	slices.Sort(took)
	pct := func(p float64) float64 {
		return float64(took[int(p*float64(len(took)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
