package localfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// zfsSuperMagic is OpenZFS's, which golang.org/x/sys/unix does not name.
const zfsSuperMagic = 0x2fc12fc1

// Holds reports whether f is on a file system known to be local: the
// common disk file systems, tmpfs and overlayfs (containers). Others,
// network ones among them, are not. The wazero patch's MmapCodeFile
// (third_party/wazero.patch) keeps the same list: that module cannot
// import this one, so a change here goes there too.
func Holds(f *os.File) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &fs) != nil {
		return false
	}
	switch uint32(fs.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC, unix.BCACHEFS_SUPER_MAGIC, zfsSuperMagic:
		return true
	}
	return false
}
