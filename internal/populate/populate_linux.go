package populate

import "golang.org/x/sys/unix"

// Pages maps the whole pages of b for writing, their contents untouched. A
// kernel that refuses (before Linux 5.14) leaves them to fault as before.
func Pages(b []byte) {
	if b = WholePages(b); len(b) > 0 {
		unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	}
}
