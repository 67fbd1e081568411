//go:build !linux

package populate

// Pages does nothing here: MADV_POPULATE_WRITE is Linux's.
func Pages(b []byte) {}
