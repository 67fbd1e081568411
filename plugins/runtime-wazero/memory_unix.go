//go:build linux || darwin || freebsd

package wazeroruntime

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// withMappedMemory makes the instances created with ctx keep their linear
// memories outside the Go heap, in a mapping that reserves the memory's
// maximum up front (address space, not RAM: pages cost memory once touched).
// By default wazero keeps a linear memory in a Go slice and grows it by
// copying into a larger one: every memory.grow of a guest then allocates on
// the host's heap (paying GC assist on the guest's thread, which the kernel
// charges to the guest's CPU budget) and copies the whole memory, and a
// thousand resident Go guests make a heap of gigabytes for the collector to
// pace. A mapping grows in place, and is handed back to the system whole
// when the instance closes.
func withMappedMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(mapMemory))
}

func mapMemory(_, max uint64) experimental.LinearMemory {
	b, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return &heapMemory{} // no address space left: fall back to the heap
	}
	return &mappedMemory{buf: b}
}

type mappedMemory struct{ buf []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil // past the maximum: memory.grow fails in the guest
	}
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		unix.Munmap(m.buf)
		m.buf = nil
	}
}

// heapMemory is wazero's default behaviour, for when a mapping fails.
type heapMemory struct{ buf []byte }

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		grown := make([]byte, size, size+size/2)
		copy(grown, m.buf)
		m.buf = grown
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *heapMemory) Free() { m.buf = nil }
