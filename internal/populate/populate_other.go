//go:build !linux

package populate

// pages does nothing here: MADV_POPULATE_WRITE is Linux's.
func pages(b []byte) {}
