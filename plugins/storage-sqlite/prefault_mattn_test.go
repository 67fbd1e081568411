//go:build cgo

package sqlitestorage

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWarmHeap: the pages warmHeap populated are still resident once it
// has freed them (glibc kept them in its arena rather than handing them
// back to the kernel, as it does with more than its top pad at the top),
// and the arena hands the same memory out again first: to the next large
// allocation on that thread (a connection's WAL index, 32 KiB, and its
// page cache's pages; its small ones come from what the arena has free).
// It fails if heapWarmBytes outgrows the mmap threshold or the top pad,
// or if glibc stops handing out freed memory this way.
func TestWarmHeap(t *testing.T) {
	runtime.LockOSThread() // one thread, one arena
	defer runtime.UnlockOSThread()
	start, end := warmHeap()
	if start == end {
		t.Skip("the kernel refused MADV_POPULATE_WRITE (Linux 5.14 and later have it)")
	}
	page := uintptr(unix.Getpagesize())
	if end-start < heapWarmBytes-2*page {
		t.Fatalf("%d bytes populated, want %d less at most two part pages", end-start, heapWarmBytes)
	}
	if n := residentPages(t, start, int(end-start)); n != int((end-start)/page) {
		t.Fatalf("%d of the %d pages populated are resident after the free", n, (end-start)/page)
	}
	if again, _ := warmHeap(); again != start {
		t.Fatalf("the arena handed out %#x after the free of %#x", again, start)
	}
}
