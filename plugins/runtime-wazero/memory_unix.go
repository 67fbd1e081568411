//go:build linux || darwin || freebsd

package wazeroruntime

import (
	"context"
	"unsafe"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
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
//
// Memory the guest grows is written once as it grows, as host work of the
// running call of in (runtime.AsHostWork, ADR 1043).
func withMemory(ctx context.Context, img *image, in *instance) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		if m, mapped := mapMemory(max, img); m != nil {
			m.in, in.imageMapped = in, mapped
			return m
		}
		return newHeapMemory(img) // no address space left
	}))
}

// mapMemory maps a memory of max bytes starting with img; nil if it cannot.
// imageMapped says img's file is mapped over its start (else it is copied).
func mapMemory(max uint64, img *image) (m *mappedMemory, imageMapped bool) {
	b, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, false
	}
	if imageMapped = img != nil && img.mapInto(b); img != nil && !imageMapped {
		copy(b, img.data)
	}
	return &mappedMemory{buf: b, size: ^uint64(0)}, imageMapped
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
	if _, err := unix.MmapPtr(int(img.file.Fd()), 0, unsafe.Pointer(&b[0]), n,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
		return false
	}
	linearmem.NoFaultAround(b[:n]) // else the kernel's default
	img.hot.Populate(b)
	return true
}

type mappedMemory struct {
	buf  []byte
	size uint64    // the memory's size; -1 until its first Reallocate, which makes its initial memory
	in   *instance // the instance it is the memory of, for the running call's ctx
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil // past the maximum: memory.grow fails in the guest
	}
	if m.size != ^uint64(0) && size > m.size {
		grown := m.buf[m.size:size]
		runtime.AsHostWork(m.in.ctx, func() { linearmem.Touch(grown) })
	}
	m.size = size
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		unix.Munmap(m.buf)
		m.buf = nil
	}
}
