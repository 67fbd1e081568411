//go:build !linux

package linearmem

// ReleaseZeroPages does nothing here: only Linux's MADV_DONTNEED promises
// that a private page reads as zeros (or its file's contents) afterwards.
func ReleaseZeroPages(mem []byte) int { return 0 }

// ReleaseSharedPages does nothing here: it reads Linux's /proc/self/pagemap.
func ReleaseSharedPages(mem []byte) int { return 0 }
