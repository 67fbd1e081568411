package sqlitestorage

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// SQLite's default unix VFS keeps a list of every database file the
// process has open (POSIX locks belong to the process, so it shares them
// between connections to one file) and walks it at each open: linear in
// the resident actors, a tenth of a new database's CPU at a thousand (ADR
// 1062). The plugin never has two connections to one file (claim,
// files.go), so both bindings open files on the unix-none VFS, which keeps
// no list and takes no locks, and openFile takes the one lock that still
// matters: the write lock on SQLite's lock bytes that a connection in
// exclusive locking mode holds. It is an open file description lock on a
// descriptor of its own, which conflicts with the POSIX locks of any other
// process: another process's SQLite that locks (a second server on the
// same directory, the sqlite3 shell) finds the database locked as it did
// before.
const vfsName = "unix-none"

// SQLite's lock bytes (sqlite3.c: PENDING_BYTE, then RESERVED_BYTE, then the
// SHARED_SIZE bytes from SHARED_FIRST): every lock a connection takes is in
// this range, so a write lock over it stops them all.
const (
	lockBytesStart = 0x40000000
	lockBytesLen   = 2 + 510
)

// lockWait is how long a lock held elsewhere is waited for before the
// database is reported locked: a process this one forks holds a copy of
// every descriptor, the lock's too, until it execs (they are close-on-exec),
// so a database closed a moment ago can look locked for that long.
const lockWait = 200 * time.Millisecond

// lockedConn is a connection to a file and the lock openFile took on it.
type lockedConn struct {
	conn
	lockFD int
}

// openFile opens a connection to the database file at path, creating the
// file if absent, locked before SQLite opens it: here, or, if lockFD is
// not -1, by that descriptor of the file already (a new database's, locked
// before it took the path: create). The lock's descriptor is closed if the
// connection cannot open.
func openFile(b binding, path string, lockFD int) (conn, error) {
	fd := lockFD
	if fd < 0 {
		var err error
		if fd, err = lockDBFile(path, true); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	c, err := b.open(path)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &lockedConn{conn: c, lockFD: fd}, nil
}

// close closes the connection, which may write the file (a checkpoint),
// before it lets the lock go.
func (c *lockedConn) close() error {
	return errors.Join(c.conn.close(), unix.Close(c.lockFD))
}

// lockDBFile takes the write lock on the SQLite lock bytes of the file at
// path (created if absent and create is set, with SQLite's permissions)
// and returns the descriptor that holds it. Its errors do not name path.
func lockDBFile(path string, create bool) (int, error) {
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if create {
		flags |= unix.O_CREAT
	}
	fd, err := openNoEINTR(path, flags, 0o644)
	if err != nil {
		return -1, err
	}
	if err := lockBytes(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// lockBytes takes the write lock on the SQLite lock bytes of the file open
// at fd, waiting up to lockWait for another process to let it go.
func lockBytes(fd int) error {
	lock := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: lockBytesStart, Len: lockBytesLen}
	var err error
	for wait, deadline := time.Millisecond, time.Now().Add(lockWait); ; wait *= 2 {
		err = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lock)
		if !heldElsewhere(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
	}
	switch {
	case err == nil:
		return nil
	case heldElsewhere(err):
		return fmt.Errorf("the database is locked by another process (a second server on this data directory, or a sqlite3 shell): %w", err)
	default:
		return fmt.Errorf("locking the database: %w", err)
	}
}

// heldElsewhere says a lock request failed for a conflicting lock (fcntl
// answers either errno).
func heldElsewhere(err error) bool { return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) }
