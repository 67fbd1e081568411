package bucketbench

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
)

// The harness itself, on the in-memory reference bucket: a floor for the
// providers' numbers, and a check that Run works (go test -bench . -benchtime 1x).
func BenchmarkMemory(b *testing.B) {
	Run(b, buckettest.NewMemory(buckettest.Flaws{}))
}
