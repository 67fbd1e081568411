package linearmem

import (
	"iter"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/populate"
)

// mappedRuns returns the first max pages of mem mapped now, in runs; nil
// if /proc/self/pagemap cannot be read.
func mappedRuns(mem []byte, max int) []pageRun {
	mem = populate.WholePages(mem)
	entries, err := pageFlags(mem)
	if err != nil {
		return nil
	}
	var runs []pageRun
	for i, e := range entries {
		if e&pagePresent == 0 {
			continue
		}
		if max--; max < 0 {
			break
		}
		// Not the file's: a copy of the image's page, or zeros. (An
		// unprivileged process cannot tell the zero page a read of anonymous
		// memory maps from a page written: both are learned as written.)
		write := e&pageFile == 0
		if n := len(runs); n > 0 && runs[n-1].end == i && runs[n-1].write == write {
			runs[n-1].end = i + 1
			continue
		}
		runs = append(runs, pageRun{i, i + 1, write})
	}
	return runs
}

// Populate maps the learned pages of mem, a new instance's memory from its
// start (its image mapped), before its guest runs. Where the kernel refuses
// (before Linux 5.14) the pages fault as they would have.
func (h *HotPages) Populate(mem []byte) {
	for run, write := range h.runsIn(mem) {
		advice := unix.MADV_POPULATE_READ
		if write {
			advice = unix.MADV_POPULATE_WRITE
		}
		if unix.Madvise(run, advice) != nil {
			return
		}
	}
}

// Read reads each learned page of mem once (mem as Populate takes it),
// populate.Read: a memory made ahead of its instance (ADR 1061) pays the
// first accesses off its instance's path.
func (h *HotPages) Read(mem []byte) {
	for run := range h.runsIn(mem) {
		populate.Read(run)
	}
}

// runsIn yields the learned runs of mem, a memory from its start, each
// with whether it is populated for writing, up to the first mem does not
// hold whole.
func (h *HotPages) runsIn(mem []byte) iter.Seq2[[]byte, bool] {
	return func(yield func([]byte, bool) bool) {
		mem = populate.WholePages(mem)
		for _, r := range h.learned() {
			if r.end*pageSize > len(mem) || !yield(mem[r.first*pageSize:r.end*pageSize], r.write) {
				return
			}
		}
	}
}
