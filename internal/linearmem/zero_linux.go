package linearmem

import (
	"bytes"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

var zeroPage = make([]byte, pageSize)

// ReleaseZeroPages hands back to the system the pages of mem that are
// resident and hold only zeros, and returns how many bytes that freed. The
// guest reads zeros there still: mem must be a private mapping, anonymous or
// of a file whose contents there are zeros too (beyond a module's Layout.End,
// say), and no guest code may run in it meanwhile. The Go runtime zeroes
// such pages as it starts: it clears the gap it skips to align its first
// heap arena, about 200 KiB of memory that was zero already.
func ReleaseZeroPages(mem []byte) int {
	if skip := -int(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))) & (pageSize - 1); skip < len(mem) {
		mem = mem[skip:]
	} else {
		return 0
	}
	mem = mem[:len(mem)/pageSize*pageSize]
	resident := make([]byte, len(mem)/pageSize)
	if len(mem) == 0 || mincore(mem, resident) != nil {
		return 0
	}
	freed, run := 0, -1
	release := func(end int) {
		if run >= 0 && unix.Madvise(mem[run*pageSize:end*pageSize], unix.MADV_DONTNEED) == nil {
			freed += (end - run) * pageSize
		}
		run = -1
	}
	for i, r := range resident {
		if r&1 != 0 && bytes.Equal(mem[i*pageSize:(i+1)*pageSize], zeroPage) {
			if run < 0 {
				run = i
			}
			continue
		}
		release(i)
	}
	release(len(resident))
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
