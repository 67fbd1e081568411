package node

import (
	"syscall"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// The data disk (book, Monitoring): a node whose data directory's disk
// has less than Options.MinFreeDisk free is not ready, so a balancer stops
// sending it new work before writes start failing. The free space is
// sampled every diskSample, off the request path.

// diskSample is how often the free space is read.
const diskSample = 5 * time.Second

// DiskSpace is the space an unprivileged process may still write on the
// filesystem holding dir, and that filesystem's size, in bytes.
func DiskSpace(dir string) (free, size uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// sampleDisk reads the free space every diskSample until the node stops
// (New read it once before it returned).
func (n *Node) sampleDisk() {
	for clock.Sleep(n.ctx, n.clock, diskSample) == nil {
		n.readDisk()
	}
}

// readDisk reads the free space and says whether the node is short of it;
// a read that fails changes nothing (logged, as each change is).
func (n *Node) readDisk() {
	free, _, err := DiskSpace(n.opts.DataDir)
	if err != nil {
		if !n.diskUnread.Swap(true) {
			n.log.Warn("reading the data directory's free space", "dir", n.opts.DataDir, "err", err)
		}
		return
	}
	n.diskUnread.Store(false)
	low := free < uint64(n.opts.MinFreeDisk)
	if low == n.diskLow.Swap(low) {
		return
	}
	if low {
		n.log.Error("the data directory's disk is nearly full: not ready until it has room", "free_bytes", free, "min_free_bytes", n.opts.MinFreeDisk)
	} else {
		n.log.Info("the data directory's disk has room again", "free_bytes", free)
	}
}
