package sqlitestorage

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// SQLite's default unix VFS keeps a list of every database and log file the
// process has open (POSIX locks belong to the process, so it shares them
// between connections to one file) and walks it at each open: linear in the
// resident actors, a tenth of a new database's CPU at a thousand (ADR 1062).
// The plugin never has two connections to one file (claim, files.go), so
// both bindings open files on the unix-none VFS, which keeps no list and
// takes no locks, and openFile takes the one lock that still matters: the
// write lock on SQLite's lock bytes that a connection in exclusive locking
// mode holds. It is an open file description lock on a descriptor of its
// own, which conflicts with the POSIX locks of any other process: another
// process's SQLite (a second server on the same directory, the sqlite3
// shell) finds the database locked as it did before.
const vfsName = "unix-none"

// SQLite's lock bytes (sqlite3.c: PENDING_BYTE, then RESERVED_BYTE, then the
// SHARED_SIZE bytes from SHARED_FIRST): every lock a connection takes is in
// this range, so a write lock over it stops them all.
const (
	lockBytesStart = 0x40000000
	lockBytesLen   = 2 + 510
)

// lockedConn is a connection to a file and the lock openFile took on it.
type lockedConn struct {
	conn
	lockFD int
}

// openFile opens a connection to the database file at path, with its lock.
func openFile(b binding, path string) (conn, error) {
	c, err := b.open(path) // creates the file if absent
	if err != nil {
		return nil, err
	}
	fd, err := lockDBFile(path)
	if err != nil {
		c.close()
		return nil, err
	}
	return &lockedConn{conn: c, lockFD: fd}, nil
}

// close closes the connection, which may write the file (a checkpoint),
// before it lets the lock go.
func (c *lockedConn) close() error {
	return errors.Join(c.conn.close(), unix.Close(c.lockFD))
}

// lockDBFile takes the write lock on path's SQLite lock bytes and returns the
// descriptor that holds it.
func lockDBFile(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	lock := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: lockBytesStart, Len: lockBytesLen}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lock); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return -1, fmt.Errorf("open %s: another process holds the database's lock (a second server on this data directory, or a sqlite3 shell): %w", path, err)
		}
		return -1, fmt.Errorf("open %s: locking it: %w", path, err)
	}
	return fd, nil
}
