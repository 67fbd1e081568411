package mtlstransport

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/transporttest"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// TestConformance runs the transport/v1 suite, every rule.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func() (transport.Transport, error) { return Open(5 * time.Second) })
}
