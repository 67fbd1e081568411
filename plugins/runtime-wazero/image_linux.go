package wazeroruntime

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newImage puts data in a sealed memory file (memfd), which instances map
// copy-on-write: it lives in the page cache once for all of them.
func newImage(data []byte) (*image, error) {
	fd, err := unix.MemfdCreate("wasmkeep-wazero-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memory image: %w", err)
	}
	f := os.NewFile(uintptr(fd), "wasmkeep-wazero-image")
	size := int64(len(data)+unix.Getpagesize()-1) &^ int64(unix.Getpagesize()-1)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("memory image: %w", err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("memory image: %w", err)
	}
	// Sealed, the file can no longer change under the instances mapping it.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("memory image: %w", err)
	}
	return &image{data: data, file: f}, nil
}
