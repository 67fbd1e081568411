//go:build !(linux || darwin || freebsd)

package wazeroruntime

import "context"

// withMappedMemory keeps wazero's heap-backed memories where mappings are
// not available.
func withMappedMemory(ctx context.Context) context.Context { return ctx }
