//go:build unix

package platform

import (
	"os"

	"golang.org/x/sys/unix"
)

func munmapCodeSegment(code []byte) error {
	return unix.Munmap(code)
}

// MprotectCodeSegment is like unix.Mprotect with RX permission.
func MprotectCodeSegment(b []byte) (err error) {
	return unix.Mprotect(b, unix.PROT_READ|unix.PROT_EXEC)
}

// MmapCodeFile maps n bytes of f from offset (a multiple of the page size)
// as read-only machine code: the page cache's pages, touched as the code
// runs, rather than a copy of the file (WasmKeep patch). Only code nothing
// writes may be mapped so: a mapping over a file changed in place would
// change under the code running it.
func MmapCodeFile(f *os.File, offset int64, n int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), offset, n, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
}
