package plaintext

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/transporttest"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// TestConformance runs the transport/v1 suite on plain TCP, declared
// unauthenticated: the rules that need authentication are skipped.
func TestConformance(t *testing.T) {
	transporttest.RunWith(t, func() (transport.Transport, error) { return New(), nil },
		transporttest.Options{Unauthenticated: true})
}
