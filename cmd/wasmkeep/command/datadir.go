package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFile is the file in the data directory whose lock a serving process
// holds, and which says who it is.
const lockFile = "wasmkeep.lock"

// dataDirLock is a data directory held by this process.
type dataDirLock struct {
	f       *os.File
	started time.Time
}

// lockDataDir takes the data directory for this process's life: a second
// process serving the same databases would run the same actors at once
// (issue 24, item 14). The lock is the kernel's (flock), so it goes with
// the process however it ends; the file, left behind, names the holder for
// the refusal of the next one while it lives.
func lockDataDir(dir, listen string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another process (%s): stop it, or give this one a --data-dir of its own",
				dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("locking the data directory (%s): %w", path, err)
	}
	l := &dataDirLock{f, time.Now()}
	if err := l.note(listen); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// note writes who holds the directory: this process, since when, and where
// it listens.
func (l *dataDirLock) note(listen string) error {
	s := fmt.Sprintf("pid %d, started %s, listening on %s\n", os.Getpid(), l.started.UTC().Format(time.RFC3339), listen)
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(s), 0)
	return err
}

// release lets the directory go (exiting does too).
func (l *dataDirLock) release() { l.f.Close() }
