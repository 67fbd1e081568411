//go:build !linux

package linearmem

// mappedRuns learns nothing here: it reads Linux's /proc/self/pagemap.
func mappedRuns(mem []byte, max int) []pageRun { return nil }

// Populate does nothing here: it is Linux's madvise.
func (h *HotPages) Populate(mem []byte) {}

// Read does nothing here: nothing is learned.
func (h *HotPages) Read(mem []byte) {}
