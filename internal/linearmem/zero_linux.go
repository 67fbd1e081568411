package linearmem

import (
	"bytes"
	"encoding/binary"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/populate"
)

var pageSize = populate.PageSize

var zeroPage = make([]byte, pageSize)

// ReleaseZeroPages hands back to the system the pages of mem that are
// resident and hold only zeros, and returns how many bytes that freed. The
// guest reads zeros there still: mem must be a private mapping, anonymous or
// of a file whose contents there are zeros too (beyond a module's Layout.End,
// say), and no guest code may run in it meanwhile. The Go runtime zeroes
// such pages as it starts: it clears the gap it skips to align its first
// heap arena, about 200 KiB of memory that was zero already.
func ReleaseZeroPages(mem []byte) int {
	mem = populate.WholePages(mem)
	resident := make([]byte, len(mem)/pageSize)
	if len(mem) == 0 || mincore(mem, resident) != nil {
		return 0
	}
	return releasePages(mem, func(i int) bool {
		return resident[i]&1 != 0 && bytes.Equal(mem[i*pageSize:(i+1)*pageSize], zeroPage)
	})
}

// ReleaseSharedPages unmaps the pages of mem that are mapped from a file and
// not written (so still shared with every other mapping of it), and returns
// how many bytes that unmapped. The next access maps them again from the
// file, with the same contents: mem must be a private mapping of a file that
// does not change, and no guest code may run in it meanwhile.
//
// Why: a guest reads its data image sparsely, but the kernel maps up to
// 64 KiB around every page it faults in (fault-around), so after a Go
// guest's start every instance maps nearly all of its 1.1 MiB image. The
// pages cost memory once, in the page cache, but RSS counts them in every
// instance; unmapped after the start, an instance maps again only what its
// requests read.
func ReleaseSharedPages(mem []byte) int {
	mem = populate.WholePages(mem)
	entries, err := pageFlags(mem)
	if err != nil {
		return 0
	}
	// A page written since it was mapped is anonymous: only the file's own
	// pages have pageFile.
	return releasePages(mem, func(i int) bool {
		return entries[i]&(pagePresent|pageFile) == pagePresent|pageFile
	})
}

// Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagePresent = 1 << 63 // mapped in this process
	pageFile    = 1 << 61 // a file's page, or shared anonymous memory
)

// pageFlags returns the /proc/self/pagemap entry of each page of mem, which
// is whole pages.
func pageFlags(mem []byte) ([]uint64, error) {
	f, err := pagemap()
	if err != nil || len(mem) == 0 {
		return nil, err
	}
	// 8 bytes a page, at the page's address / pageSize * 8.
	b := make([]byte, len(mem)/pageSize*8)
	if _, err := f.ReadAt(b, int64(uintptr(unsafe.Pointer(&mem[0]))/uintptr(pageSize)*8)); err != nil {
		return nil, err
	}
	entries := make([]uint64, len(b)/8)
	for i := range entries {
		entries[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return entries, nil
}

// pagemap is /proc/self/pagemap, opened once.
var pagemap = sync.OnceValues(func() (*os.File, error) { return os.Open("/proc/self/pagemap") })

// releasePages hands back, in runs, the pages i of mem (whole pages) for
// which release(i) holds, and returns how many bytes that was.
func releasePages(mem []byte, release func(i int) bool) int {
	freed, run := 0, -1
	flush := func(end int) {
		if run >= 0 && unix.Madvise(mem[run*pageSize:end*pageSize], unix.MADV_DONTNEED) == nil {
			freed += (end - run) * pageSize
		}
		run = -1
	}
	pages := len(mem) / pageSize
	for i := range pages {
		if release(i) {
			if run < 0 {
				run = i
			}
			continue
		}
		flush(i)
	}
	flush(pages)
	return freed
}

// mincore reports which pages of b are resident, one byte each (bit 0).
func mincore(b, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}
