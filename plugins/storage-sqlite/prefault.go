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
// 30: a new C actor").
//
// modernc's allocator (modernc.org/memory) maps C memory in 64 KiB regions
// and keeps the regions freed on a stack it hands out last-in first-out.
// So before a connection opens, prefault takes warmRegions regions from
// that stack, has the kernel populate them (MADV_POPULATE_WRITE: page
// tables filled as a write would, contents untouched) and frees them back
// on top, where the connection's allocations find them. Regions already
// populated cost the call a walk of their page tables; a kernel older than
// 5.14 refuses the call, and the connection faults its pages in as before.
//
// Only while more connections are open than ever before: a connection
// opened after another closed (an actor woken again) finds the regions
// the closed one freed, resident, and the calls would find nothing to do
// at about 5 µs each.
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
)

// connections counts the modernc connections open and the most ever open
// at once.
var connections struct{ open, peak atomic.Int64 }

// opening is called before a connection opens: it prefaults if the
// process is about to hold more connections than it ever has.
func opening(tls *libc.TLS) {
	if connections.open.Load() >= connections.peak.Load() {
		prefault(tls)
	}
}

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
