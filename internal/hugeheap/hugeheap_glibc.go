//go:build cgo && linux

package hugeheap

/*
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WK_HUGE ((uintptr_t)2 << 20)
// WK_TOP_PAD is how much more than it needs the heap grows by each time:
// what Advise finds untouched in whole blocks goes on huge pages. Faults
// per new C actor: 15.8 with 8 MiB, 11.6 with 32 (glibc's own
// glibc.malloc.hugetlb=1: 11 to 12).
#define WK_TOP_PAD (32 << 20)

// wk_heap_base is the first whole 2 MiB block of the heap Advise covers:
// the program break when the heap was prepared. 0: not prepared.
static uintptr_t wk_heap_base;

// wk_huge_pages_on reports whether the kernel's transparent huge pages
// are not "never".
static int wk_huge_pages_on(void) {
	int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return 0;
	}
	char buf[128];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) {
		return 0;
	}
	buf[n] = 0;
	return strstr(buf, "[never]") == 0;
}

// wk_hugeheap_prepare makes glibc's main arena the only one and has it
// grow WK_TOP_PAD more than it needs, where the kernel has huge pages and
// the C library is glibc; it reports whether it did. A process calls it
// from a C constructor (cmd/wasmkeep/command), before its threads
// allocate: a thread's arena is decided at its first allocation, for good.
int wk_hugeheap_prepare(void) {
#if defined(__GLIBC__) && defined(M_ARENA_MAX) && defined(MADV_HUGEPAGE)
	if (wk_heap_base != 0) {
		return 1;
	}
	if (!wk_huge_pages_on() || mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_TOP_PAD, WK_TOP_PAD) != 1) {
		return 0;
	}
	wk_heap_base = ((uintptr_t)sbrk(0) + WK_HUGE - 1) & ~(WK_HUGE - 1);
	return 1;
#else
	return 0;
#endif
}

static int wk_heap_prepared(void) { return wk_heap_base != 0; }

static void wk_heap_advise(void) {
	uintptr_t top = (uintptr_t)sbrk(0) & ~(WK_HUGE - 1);
	if (wk_heap_base != 0 && top > wk_heap_base) {
		madvise((void *)wk_heap_base, top - wk_heap_base, MADV_HUGEPAGE);
	}
}
*/
import "C"

import "sync/atomic"

var inUse atomic.Bool

// Prepared reports whether the process's constructor prepared the heap
// (cmd/wasmkeep/command): its main arena the only one, for good.
func Prepared() bool { return C.wk_heap_prepared() == 1 }

// Use puts the prepared C heap on huge pages from now on and reports
// whether it does: not unless the heap was prepared.
func Use() bool {
	if Prepared() && !inUse.Swap(true) {
		C.wk_heap_advise()
	}
	return inUse.Load()
}

// Advise extends the advice over the heap's whole 2 MiB blocks, those it
// grew since the last call included; it does nothing unless Use did. Call
// it before a burst of new C allocations (a new connection): a block the
// heap already touched in small pages stays in them.
func Advise() {
	if inUse.Load() {
		C.wk_heap_advise()
	}
}
