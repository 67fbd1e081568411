//go:build linux

package replication

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

// A restore whose local file cannot be written (the process may write no
// file past one byte: a full disk, as the kernel says it) fails as a
// restore to retry, never as a broken history, and changes nothing; once
// the disk takes writes again the next start restores the actor.
// (Before issue 24, item 7c, the write error read as history.ErrBroken:
// the actor refused until repaired, 500 instead of 503.)
func TestRestoreLocalDiskErrorIsNotBroken(t *testing.T) {
	w := newWorld(t)
	want := w.write(addr, 1, 10, 3)
	drv := newDriver()
	r := w.node(drv)
	var was unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	// Writing past the limit is EFBIG: Go ignores SIGXFSZ.
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1, Max: was.Max}); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.Open(context.Background(), addr, 2, func() bool { return true })
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	if err == nil || errors.Is(err, history.ErrBroken) || !errors.Is(err, unix.EFBIG) {
		t.Fatalf("a restore on a disk that refuses writes: %v, want the disk's error (EFBIG), not a broken history", err)
	}
	if drv.Pages(addr) != nil || w.restFail != 1 {
		t.Errorf("after the failed restore: local pages %v, %d failures counted (want none, 1)", drv.Pages(addr) != nil, w.restFail)
	}
	st, db, err := r.Open(context.Background(), addr, 2, func() bool { return true })
	if err != nil {
		t.Fatalf("the next start, the disk writable: %v", err)
	}
	defer db.Close()
	defer st.Close(context.Background())
	if !sameState(db.(*fakeDB).Pages(), want) {
		t.Error("the next start did not restore the actor's state")
	}
}
