// Package hugeheap puts the C heap (glibc's malloc, from which SQLite
// allocates with the mattn driver) on transparent huge pages (ADR 1067).
//
// A new actor's SQLite connection touches about thirty pages of C memory
// nothing touched before, and where a first touch is dear (10 to 40 µs on
// the VMs the bench runs on, a page populated ahead included) those faults
// are a quarter of a new actor's CPU. On huge pages the heap is mapped 2
// MiB at a time, so a new connection's memory is mostly inside pages
// already mapped.
//
// glibc puts only its main arena on huge pages, and only when told at the
// process's start (glibc.malloc.hugetlb). So the process prepares the heap
// from a C constructor, before its threads allocate: the main arena the
// only one, grown 32 MiB more than it needs. Its settings read, it Uses
// the huge pages, and Advise advises the heap's whole 2 MiB blocks for
// them before each burst of allocations, what the heap grew since
// included.
//
// It suits a process whose C allocations are dense. Memory allocated but
// never touched (Wasmtime's lazily filled instance tables) becomes
// resident with the huge page around it, so a process with such
// allocations does not use it (plugin.Info.SparseCHeap).
package hugeheap
