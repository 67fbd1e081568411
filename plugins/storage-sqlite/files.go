package sqlitestorage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// An actor's files under the data root (README.md, "Files on disk"):
//
//	<root>/actors/<tenant>/<class>/<file>.db           the database
//	<root>/actors/<tenant>/<class>/<file>.db-wal       its write-ahead log (-shm, -journal: not written
//	                                                   by this plugin, removed if found)
//	<root>/actors/<tenant>/<class>/<file>.db.replaced  the database the last Restore replaced
//	<root>/actors/<tenant>/<class>/<file>.db.restoring a Restore's new database, until it takes its place
//
// <file> is the name percent-encoded (fileName), so a path never depends
// on what a name holds.
const (
	dbSuffix        = ".db"
	replacedSuffix  = ".replaced"
	restoringSuffix = ".restoring"
)

// logSuffixes are SQLite's files beside a database, the log first: removing
// the log before the database means a crash part way never leaves an old
// log beside a new database of the same name.
var logSuffixes = []string{"-wal", "-shm", "-journal"}

// fileName encodes an actor name as a file name: bytes outside
// [A-Za-z0-9_-] become %XX (so "." and ".." cannot escape the directory and
// distinct names stay distinct files); a name whose encoding is too long for
// a file system keeps a readable prefix and a hash of the whole name. Data
// directories written before storage/v2 (when the kernel named the files)
// use the same names.
func fileName(name string) string {
	const hexDigits = "0123456789ABCDEF"
	enc := make([]byte, 0, len(name))
	for _, c := range []byte(name) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			enc = append(enc, c)
		} else {
			enc = append(enc, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	if len(enc) > 200 {
		sum := sha256.Sum256([]byte(name))
		enc = append(enc[:120], "~"+hex.EncodeToString(sum[:16])...)
	}
	return string(enc) + dbSuffix
}

// dirName reports whether a tenant or class can name a directory of its
// own under root.
func dirName(part string) bool {
	return part != "" && part != "." && part != ".." && !strings.ContainsAny(part, "/\\\x00")
}

// dbPath is where an actor's database lives under root. It refuses an
// address that could leave its directory.
func dbPath(root string, addr abi.Address) (string, error) {
	for _, part := range []string{addr.Tenant, addr.Class} {
		if !dirName(part) {
			return "", fmt.Errorf("address %s/%s/%s: %q cannot name a directory", addr.Tenant, addr.Class, addr.Name, part)
		}
	}
	if addr.Name == "" {
		return "", fmt.Errorf("address %s/%s: the name is empty", addr.Tenant, addr.Class)
	}
	return filepath.Join(root, "actors", addr.Tenant, addr.Class, fileName(addr.Name)), nil
}

// opened is the set of database files open in this process (by path): a
// second connection would find the file locked (filelock.go), and removing
// or replacing an open database's files would lose what its connection
// writes next.
var opened = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

// claim marks path open; the returned func releases it.
func claim(path string) (release func(), err error) {
	opened.Lock()
	defer opened.Unlock()
	if opened.paths[path] {
		return nil, storage.ErrOpen
	}
	opened.paths[path] = true
	return func() {
		opened.Lock()
		delete(opened.paths, path)
		opened.Unlock()
	}, nil
}

// claimActor claims the database of addr under root, which must not be
// open, for op.
func claimActor(op, root string, addr abi.Address) (path string, release func(), err error) {
	if path, err = dbPath(root, addr); err != nil {
		return "", nil, err
	}
	if release, err = claim(path); err != nil {
		return "", nil, fmt.Errorf("%s %s: %w", op, path, err)
	}
	return path, release, nil
}

func (drv *driver) Open(_ context.Context, root string, addr abi.Address, opts storage.Options) (storage.DB, error) {
	path, err := dbPath(root, addr)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	return drv.openPath(path, opts, true)
}

// openPath opens the database at path, claimed for as long as it is open.
// With create, a database it creates starts as opts.Prepare says
// (template.go).
func (drv *driver) openPath(path string, opts storage.Options, create bool) (*db, error) {
	opts = opts.Defaults()
	if err := checkOptions(path, opts); err != nil {
		return nil, err
	}
	release, err := claim(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	m := made{lockFD: -1}
	if create && len(opts.Prepare.Statements) > 0 {
		if m, err = drv.create(path, opts.Prepare); err != nil {
			release()
			return nil, err
		}
	}
	d, err := drv.open(path, m.lockFD, opts)
	if err == nil && m.run {
		if err = d.runPreparation(opts.Prepare.Statements); err != nil {
			err = fmt.Errorf("open %s: preparing the new database: %w", path, err)
		}
	}
	if err != nil {
		if d != nil { // opened, not prepared
			d.Close()
		}
		release()
		return nil, err
	}
	d.release, d.created = release, m.created
	return d, nil
}

func (drv *driver) Exists(_ context.Context, root string, addr abi.Address) (bool, error) {
	path, err := dbPath(root, addr)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Remove deletes the log, then the database, then what a Restore left,
// then syncs the directory. It holds the database's lock meanwhile
// (filelock.go): another process may have it open.
func (drv *driver) Remove(_ context.Context, root string, addr abi.Address) error {
	path, release, err := claimActor("remove", root, addr)
	if err != nil {
		return err
	}
	defer release()
	if fd, err := lockDBFile(path, false); err == nil {
		defer unix.Close(fd)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	for _, f := range []string{path, path + restoringSuffix, path + replacedSuffix} {
		if err := removeWithLogs(f); err != nil {
			return err
		}
	}
	if err := syncDir(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Restore swaps in a new database in these steps, each leaving the actor
// with a whole database at its path if a crash stops it there:
//
//  1. src is copied to <file>.db.restoring and fsynced, then opened and
//     checked (quick_check); a failure removes it and leaves the old
//     database alone.
//  2. The old database, if any, is checkpointed (its log folded into the
//     file and truncated), so the file alone holds all it committed; its
//     emptied log is removed, so it cannot be replayed onto the new one.
//  3. The old file is hard-linked as <file>.db.replaced (an earlier
//     .replaced is removed first): the old database now has two names.
//  4. rename(<file>.db.restoring, <file>.db): the one atomic step. Before
//     it the path names the old database, after it the new one.
//  5. The directory is fsynced, making the rename durable.
func (drv *driver) Restore(ctx context.Context, root string, addr abi.Address, src io.Reader) error {
	path, release, err := claimActor("restore", root, addr)
	if err != nil {
		return err
	}
	defer release()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp := path + restoringSuffix
	defer removeWithLogs(tmp) // on failure; after the rename there is nothing left to remove
	if err := writeSynced(tmp, src); err != nil {
		return fmt.Errorf("restore %s: writing the new database: %w", path, err)
	}
	if err := drv.check(tmp); err != nil {
		return fmt.Errorf("restore %s: the new database: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil {
		if err := drv.checkpoint(path); err != nil {
			return fmt.Errorf("restore %s: checkpointing the old database: %w", path, err)
		}
		if err := removeWithLogs(path + replacedSuffix); err != nil {
			return err
		}
		if err := os.Link(path, path+replacedSuffix); err != nil {
			return fmt.Errorf("restore %s: keeping the old database: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	return syncDir(dir)
}

// Snapshot checkpoints the database, so that the file alone holds what it
// committed, and copies the file.
func (drv *driver) Snapshot(_ context.Context, root string, addr abi.Address, w io.Writer) error {
	path, release, err := claimActor("snapshot", root, addr)
	if err != nil {
		return err
	}
	defer release()
	f, err := os.Open(path) // before checkpoint, which would create an absent file
	if err != nil {
		return err
	}
	defer f.Close()
	if err := drv.checkpoint(path); err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	_, err = io.Copy(w, f)
	return err
}

// noEINTR makes a system call again while a signal interrupts it, as
// package os does: the runtime's preemption signals interrupt a slow file
// system's calls.
func noEINTR(call func() error) error {
	for {
		if err := call(); err != unix.EINTR {
			return err
		}
	}
}

// openNoEINTR is open(2) under noEINTR.
func openNoEINTR(path string, flags int, perm uint32) (fd int, err error) {
	err = noEINTR(func() error {
		fd, err = unix.Open(path, flags, perm)
		return err
	})
	return fd, err
}

// writeSynced writes src to a new file at path and fsyncs it. The file is
// opened with open(2) and wrapped by os.NewFile, since os.OpenFile tries
// to register a regular file with the network poller: four fcntl calls
// and an epoll_ctl that fails, at each new actor's database.
func writeSynced(path string, src io.Reader) error {
	fd, err := openNoEINTR(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = io.Copy(f, src)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// check opens the database file at path on a bare connection and runs
// quick_check; the connection's log is gone once it closes.
func (drv *driver) check(path string) error {
	return drv.bare(path, func(c conn) error {
		v, err := pragmaOn(c, "PRAGMA quick_check")
		if err != nil {
			return err
		}
		if string(v.Bytes) != "ok" {
			return fmt.Errorf("quick_check: %s", v.Bytes)
		}
		return nil
	})
}

// checkpoint folds the log of the database at path into the file and
// truncates it, then removes the log.
func (drv *driver) checkpoint(path string) error {
	err := drv.bare(path, func(c conn) error {
		if _, err := pragmaOn(c, "PRAGMA journal_mode"); err != nil { // reads the header, recovers the log
			return err
		}
		busy, err := pragmaOn(c, "PRAGMA wal_checkpoint(TRUNCATE)")
		if err == nil && busy.Int != 0 {
			err = errors.New("the log could not be checkpointed")
		}
		return err
	})
	if err != nil {
		return err
	}
	return removeFiles(suffixed(path, logSuffixes))
}

// bare runs f on a connection to path with exclusive locking (no -shm
// file), as the plugin's own connections have, and without its sandbox.
func (drv *driver) bare(path string, f func(conn) error) error {
	c, err := openFile(drv.b, path, -1)
	if err != nil {
		return err
	}
	if _, err = pragmaOn(c, "PRAGMA locking_mode=EXCLUSIVE"); err == nil {
		err = f(c)
	}
	return errors.Join(err, c.close())
}

// pragmaOn runs a setup statement on c and returns the first column of its
// first row.
func pragmaOn(c conn, sql string) (abi.Value, error) {
	s, _, err := c.prepare(sql)
	if err != nil {
		return abi.Value{}, err
	}
	defer s.finalize()
	return stepValue(s)
}

// removeWithLogs removes a database file and its log files, the log first.
func removeWithLogs(path string) error {
	return removeFiles(append(suffixed(path, logSuffixes), path))
}

// removeFiles removes files in order; one that is absent is not an error.
func removeFiles(files []string) error {
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func suffixed(path string, suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = path + s
	}
	return out
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Walk visits <root>/actors/<tenant>/<class>/*.db, class by class, in
// directory order.
func (drv *driver) Walk(ctx context.Context, root, tenant string, opts storage.Options, fn func(storage.Found) error) error {
	if !dirName(tenant) {
		return fmt.Errorf("tenant %q cannot name a directory", tenant)
	}
	tdir := filepath.Join(root, "actors", tenant)
	classes, err := os.ReadDir(tdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, cl := range classes {
		if !cl.IsDir() {
			continue
		}
		cdir := filepath.Join(tdir, cl.Name())
		files, err := os.ReadDir(cdir)
		if err != nil {
			return err
		}
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), dbSuffix) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			path := filepath.Join(cdir, f.Name())
			found := storage.Found{Class: cl.Name(), Where: path}
			d, err := drv.openPath(path, opts, false)
			if err != nil {
				found.Err = err
				if err := fn(found); err != nil {
					return err
				}
				continue
			}
			found.DB = d
			err = fn(found)
			if cerr := d.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("closing %s: %w", path, cerr)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
