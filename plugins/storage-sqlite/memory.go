package sqlitestorage

// What each connection keeps while its actor is idle. SQLite's defaults
// suit a process with a few connections; a node keeps one per resident
// actor, so whatever an idle connection holds multiplies by the actors.
// Each binding's init sets these process-wide (sqlite3_config), which
// SQLite allows only before its first initialization; nothing this package
// imports initializes it, and TestMemoryConfig checks that each took. See
// README.md, "Memory per connection".
const (
	// Lookaside is a connection's pool of small allocations, set aside at
	// open and all of it resident (a free list is written through it).
	// SQLite's default is 40 slots of 1,200 bytes, 48 KiB a connection; none
	// at all costs 5 to 10% more CPU a read and up to 25% on CPU-bound SQL
	// (the package's benchmarks). 64 slots of 128 bytes, 8 KiB, keep that
	// speed: most of SQLite's allocations on a hot path are small.
	lookasideSize, lookasideSlots = 128, 64
	// By default a page cache allocates room for 20 pages at once (about
	// 85 KiB with 4 KiB pages) the first time it needs one, and writes
	// each page's header, so a database of a few pages holds 20. With 0,
	// a page is allocated when the cache first holds it.
	pageCacheInitPages = 0
)

// memoryConfig records, per binding, sqlite3_config's result codes for the
// settings above, in order: SQLITE_OK (0) each, unless something had
// initialized that SQLite already.
var memoryConfig = map[string][2]int32{}
