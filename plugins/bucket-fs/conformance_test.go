package fsbucket

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// TestConformance runs the bucket/v1 suite, every rule on a fresh open of
// one directory (so the rules also see what earlier opens left).
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	buckettest.Run(t, func(t *testing.T) bucket.Bucket { return openT(t, dir) })
}
