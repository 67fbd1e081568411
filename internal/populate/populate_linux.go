package populate

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

// pages maps the whole pages of b. A kernel that refuses (before Linux
// 5.14) leaves them to fault as before.
func pages(b []byte) {
	skip := -int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & (pageSize - 1)
	if skip >= len(b) {
		return
	}
	b = b[skip:]
	if n := len(b) / pageSize * pageSize; n > 0 {
		unix.Madvise(b[:n], unix.MADV_POPULATE_WRITE)
	}
}
