package sqlitestorage

import (
	"sync/atomic"

	"modernc.org/libc"

	"github.com/wasmkeep/wasmkeep/internal/populate"
)

// A connection's first statements touch about 30 pages of C memory that
// no connection touched before (the WAL index alone is 32 KiB SQLite
// zeroes, then its page cache, its lookaside, its schema): a page fault
// each, about 20 µs on the VMs the bench runs on against about 2 µs a page
// for the kernel to populate a range in one call (bench/README.md, "Issue
// 30: a new C actor"). So before a connection opens, while the process is
// about to hold more connections than it ever has, each binding has the
// kernel populate (MADV_POPULATE_WRITE: page tables filled as a write
// would, contents untouched) the memory its allocator will hand that
// connection next, and frees it back. A kernel older than 5.14 refuses the
// call, and the connection faults its pages in as before.
//
// Only at a new peak: a connection opened after another closed (an actor
// woken again) finds the memory the closed one freed, resident, and the
// calls would find nothing to do at about 5 µs each.
//
// modernc's allocator (modernc.org/memory) maps C memory in 64 KiB regions
// and keeps the regions freed on a stack it hands out last-in first-out:
// prefault takes warmRegions regions from that stack, populates them and
// frees them back on top, where the connection's allocations find them.
//
// glibc's malloc (mattn) gives each thread an arena and carves new memory
// from the arena's top chunk, growing it a page or so at a time (each new
// page a fault at its first write, most of them in malloc itself):
// warmHeap (mattn.go) takes heapWarmBytes on the opening thread, populates
// them and frees them, back into the top chunk when they came from it. A
// goroutine keeps its thread across the cgo calls of an open unless it is
// descheduled, so the connection's first allocations find them.
const (
	allocatorRegion = 64 << 10
	// A new connection takes the WAL index's region and parts of two or
	// three regions of small allocations. Faults left per new database in
	// BenchmarkNewDatabase/modernc/resident: 31 before, 14 with 3 regions,
	// 12.4 with 4, 11.8 with 6 (none of them more memory resident).
	warmRegions = 4
	// Of each region, the part the WAL index takes (32 KiB after the
	// region's header): populating whole regions would leave the rest of
	// the WAL index's region resident and unused, 28 KiB an actor.
	warmBytes = 36 << 10
	// Traps per new database in BenchmarkNewDatabase/mattn/resident (perf
	// stat -e page-faults, the process's own included): 20.4 before, 13.4
	// with 32 KiB, 9.4 with 48, 5.4 with 64, 2.4 with 80 to 112. It must
	// stay under glibc's mmap threshold (128 KiB by default), or the chunk
	// is a mapping of its own, which the free unmaps, and under its top pad
	// (128 KiB), the low end of the arena's top that a trim keeps: where a
	// chunk freed into the top lies (TestWarmHeap).
	heapWarmBytes = 96 << 10
)

// connections counts the connections open and the most ever open at once.
var connections struct{ open, peak atomic.Int64 }

// newPeak reports whether a connection about to open would make the
// process hold more connections than it ever has.
func newPeak() bool { return connections.open.Load() >= connections.peak.Load() }

// connOpened counts a connection that opened, connClosed one that closed.
func connOpened() {
	n := connections.open.Add(1)
	for p := connections.peak.Load(); n > p && !connections.peak.CompareAndSwap(p, n); p = connections.peak.Load() {
	}
}

func connClosed() { connections.open.Add(-1) }

func prefault(tls *libc.TLS) {
	var taken [warmRegions]uintptr
	for i := range taken {
		// Larger than the allocator's largest slot (16 KiB), so a region
		// of its own.
		if taken[i] = libc.Xmalloc(tls, allocatorRegion/2); taken[i] == 0 {
			break
		}
		region := taken[i] &^ (allocatorRegion - 1)
		populate.Pages(cbytes(region, warmBytes))
	}
	for i := len(taken) - 1; i >= 0; i-- {
		libc.Xfree(tls, taken[i])
	}
}
