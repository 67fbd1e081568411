// Package populate makes large byte buffers whose pages are mapped before
// they are first written. A page fault costs about 10 µs on the VM class
// WasmKeep is measured on (20 to 36 under load), and the kernel maps a page
// for about 0.5 µs in one madvise(MADV_POPULATE_WRITE) call, so a buffer of
// megabytes filled right after it is made (a module read from a file, a
// module rewritten) costs milliseconds less this way (bench/README.md,
// "Issue 30: the start's page faults"). Buffers the Go heap had already
// touched cost a short walk of their page tables.
package populate

import (
	"io"
	"os"
	"sync/atomic"
	"unsafe"
)

// PageSize is the system's page size.
var PageSize = os.Getpagesize()

// minBytes is the smallest buffer populated: below it the system call
// costs more than the faults it saves.
const minBytes = 64 << 10

// Make returns make([]byte, n, c), its pages mapped.
func Make(n, c int) []byte {
	b := make([]byte, n, c)
	if c >= minBytes {
		Pages(b[:c])
	}
	return b
}

// WholePages is the part of b made of whole pages.
func WholePages(b []byte) []byte {
	skip := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & (PageSize - 1)
	if skip >= len(b) {
		return nil
	}
	b = b[skip:]
	return b[:len(b)/PageSize*PageSize]
}

// Read reads the first word of each whole page of b. On a paravirtualised
// VM (the bench's) the first access to a page traps to the hypervisor,
// about 5 µs, even once the kernel has mapped it (Pages): read ahead of
// time, off the path of what will use b, that is paid there
// (bench/README.md, "Issue 30: instances made ahead"). Nothing may write b
// meanwhile.
func Read(b []byte) {
	b = WholePages(b)
	for off := 0; off < len(b); off += PageSize {
		// Atomic, so that the read is not optimised away; a page's start
		// is aligned.
		atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
	}
}

// ReadFile is os.ReadFile, into a buffer from Make.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 512
	if info, err := f.Stat(); err == nil && info.Mode().IsRegular() && int64(int(info.Size())) == info.Size() {
		size += int(info.Size()) // one more read finds the end without growing b
	}
	b := Make(0, size)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) { // the file grew
			b = append(b, 0)[:len(b)]
		}
	}
}
