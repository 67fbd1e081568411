//go:build linux || darwin || freebsd

package wazeroruntime

import (
	"context"
	"unsafe"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// withMemory makes the instances created with ctx keep their linear
// memories outside the Go heap, in a mapping that reserves the memory's
// maximum up front (address space, not RAM: pages cost memory once touched),
// starting with img (nil for none).
//
// By default wazero keeps a linear memory in a Go slice and grows it by
// copying into a larger one: every memory.grow of a guest then allocates on
// the host's heap (paying GC assist on the guest's thread, which the kernel
// charges to the guest's CPU budget) and copies the whole memory, and a
// thousand resident Go guests make a heap of gigabytes for the collector to
// pace. A mapping grows in place, and is handed back to the system whole
// when the instance closes.
//
// The image is mapped copy-on-write from its file over the start of the
// memory, as Wasmtime does: the instances of a module share the pages they
// only read (a Go guest's data is 1.1 MiB, most of it read-only), and a
// page costs an instance memory once it writes it.
func withMemory(ctx context.Context, img *image) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		return mapMemory(max, img)
	}))
}

func mapMemory(max uint64, img *image) experimental.LinearMemory {
	b, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return newHeapMemory(img) // no address space left: fall back to the heap
	}
	if img != nil && !img.mapInto(b) {
		copy(b, img.data)
	}
	return &mappedMemory{buf: b}
}

// mapInto maps the image's file over the start of b, copy-on-write.
func (img *image) mapInto(b []byte) bool {
	img.mu.RLock()
	defer img.mu.RUnlock()
	if img.file == nil || len(img.data) == 0 {
		return false
	}
	n := uintptr(len(img.data)+unix.Getpagesize()-1) &^ uintptr(unix.Getpagesize()-1)
	if n > uintptr(len(b)) {
		return false
	}
	_, err := unix.MmapPtr(int(img.file.Fd()), 0, unsafe.Pointer(&b[0]), n,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED)
	return err == nil
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
