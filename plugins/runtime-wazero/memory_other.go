//go:build !(linux || darwin || freebsd)

package wazeroruntime

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
)

// withMemory keeps wazero's heap-backed memories where mappings are not
// available, starting with img (nil for none).
func withMemory(ctx context.Context, img *image, _ *instance) context.Context {
	if img == nil {
		return ctx
	}
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory {
		return newHeapMemory(img)
	}))
}
