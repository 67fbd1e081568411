package fsbucket

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockShards is how many locks the keys are spread over: writes of keys in
// different shards never wait for each other.
const lockShards = 64

// breakAfter is how long a waiter lets one holder keep a shard before it
// breaks the lock. A holder's turn is a stat, a 24-byte read and a rename,
// so a holder still there after a second is stopped (SIGSTOP, a debugger, a
// paused container, swapping) or dead. It is well under a lease attempt
// (2.7 s by default): no process holds up another's write for longer.
const breakAfter = time.Second

// errStolen: the holder's lock was broken before its write; nothing was
// written, and the write starts over, its condition checked again.
var errStolen = errors.New("bucket-fs: the lock was broken")

// shards are the bucket's write locks (ADR 1042). A shard's lock is the
// directory <dir>/NN, held while it has an entry: the holder's staged
// change, named by a token no other turn uses (a hard link to the object
// to write, or an empty directory for a delete). A writer stages its entry
// in a directory of its own, then renames that directory to <dir>/NN,
// which succeeds only while NN is absent or empty. The write itself moves
// the entry out (rename or exchange onto the key), which releases the lock
// in the same step. A waiter that sees one entry stay for breakAfter
// removes it: the holder's write then finds no entry and fails, changing
// nothing, however late it comes, since both look the entry up by its
// name in one directory and the kernel orders the two.
type shards struct {
	dir string                    // the shards' directories
	tmp string                    // where writers stage theirs
	sem [lockShards]chan struct{} // one waiter per shard in this process polls
	// seen is, per shard, the holder its waiters in this process saw and
	// since when (under sem): kept from one waiter to the next, so that
	// waits each shorter than breakAfter (a lease write's attempt, 233 ms
	// at the tests' short settings) add up to a break, rather than every
	// waiter giving up before it and the lock of a dead holder staying.
	seen [lockShards]sighting
	done atomic.Bool
}

// sighting is a shard's holder as seen by this process's waiters.
type sighting struct {
	holder string
	since  time.Time
}

func openShards(dir, tmp string) *shards {
	s := &shards{dir: dir, tmp: tmp}
	for i := range s.sem {
		s.sem[i] = make(chan struct{}, 1)
	}
	return s
}

func shardOf(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32() % lockShards
}

// lock takes key's shard with an entry made by stage, and returns the
// entry's path, through which the holder's write goes, and release. It
// waits while another process holds the shard, breaking a lock held
// breakAfter, and ends with ctx. errStolen means the staged entry was
// removed before the shard was taken (a frozen writer's, by cleanTemps).
func (s *shards) lock(ctx context.Context, key string, stage func(path string) error) (entry string, release func(), err error) {
	i := shardOf(key)
	select {
	case s.sem[i] <- struct{}{}:
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	unlock := func() { <-s.sem[i] }
	token := make([]byte, 8)
	rand.Read(token)
	id := fmt.Sprintf("%d-%x", os.Getpid(), token)
	own := filepath.Join(s.tmp, "lock-"+id)
	shard := filepath.Join(s.dir, fmt.Sprintf("%02x", i))
	err = os.Mkdir(own, 0o700)
	if err == nil {
		err = stage(filepath.Join(own, id))
	}
	if err == nil {
		err = take(ctx, own, shard, &s.seen[i])
	}
	if err != nil {
		os.RemoveAll(own)
		unlock()
		return "", nil, err
	}
	entry = filepath.Join(shard, id)
	return entry, func() {
		os.Remove(entry) // gone already if written, or if the lock was broken
		unlock()
	}, nil
}

// take renames own, a directory holding one staged entry, to shard; seen
// is the shard's holder as this process saw it.
func take(ctx context.Context, own, shard string, seen *sighting) error {
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := rename(own, shard)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, fs.ErrNotExist) && gone(own):
			return errStolen
		case !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST):
			return err
		}
		switch h := entryOf(shard); {
		case h == "": // released meanwhile
			continue
		case h != seen.holder:
			*seen = sighting{h, time.Now()}
		case time.Since(seen.since) >= breakAfter:
			os.Remove(filepath.Join(shard, h))
			continue
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// rename is rename(2). os.Rename refuses to replace a directory, even an
// empty one, which is how a free shard is taken.
func rename(from, to string) error {
	if err := unix.Rename(from, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// entryOf names the entry that holds shard, "" if none.
func entryOf(shard string) string {
	d, err := os.Open(shard)
	if err != nil {
		return ""
	}
	defer d.Close()
	names, _ := d.Readdirnames(1)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// gone says whether path no longer exists: a staged entry that is gone was
// removed by a waiter that broke the lock.
func gone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

func (s *shards) close() { s.done.Store(true) }

func (s *shards) closed() bool { return s.done.Load() }

func flock(f *os.File, how int) error {
	for {
		if err := syscall.Flock(int(f.Fd()), how); err != syscall.EINTR {
			return err
		}
	}
}

// staleAfter is how long a temporary file or directory must be untouched
// before cleanTemps considers it. A writer flocks its temporary file right
// after creating it, so only a file that is old and unlocked was left by a
// writer that died. A directory in which a writer stages its lock entry
// lives while it waits for the shard, breakAfter at most unless it is
// frozen; removing it from a frozen writer is a broken lock, which it
// survives.
const staleAfter = time.Minute

// cleanTemps removes the temporary files and staging directories of writers
// that died mid-write.
func cleanTemps(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		info, err := de.Info()
		if err != nil || time.Since(info.ModTime()) < staleAfter {
			continue // gone meanwhile, or maybe still being created
		}
		path := filepath.Join(dir, de.Name())
		if de.IsDir() {
			// A staging (or probe) directory: its entries are files or
			// empty directories. Removed by path, not recursively: if a
			// frozen writer resumes and takes a shard with it meanwhile,
			// the removal finds nothing, or takes its entry, which is a
			// broken lock.
			names, _ := os.ReadDir(path)
			for _, n := range names {
				os.Remove(filepath.Join(path, n.Name()))
			}
			os.Remove(path)
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if flock(f, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.Remove(path)
		}
		f.Close()
	}
	return nil
}

// checkExchange refuses a file system that cannot exchange two names
// atomically (renameat2's RENAME_EXCHANGE, Linux 3.15): a delete needs it
// to remove an object only while it holds its lock.
func checkExchange(tmp string) error {
	dir, err := os.MkdirTemp(tmp, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file, sub := filepath.Join(dir, "file"), filepath.Join(dir, "dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, file, unix.AT_FDCWD, sub, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("cannot exchange a file and a directory atomically (renameat2 RENAME_EXCHANGE: %w), which bucket-fs's deletes need; use ext4, XFS, btrfs or tmpfs", err)
	}
	return nil
}

// checkFileSystem refuses network file systems: bucket-fs relies on flock,
// rename and exchange being exact for every process that opens the directory, which
// is only true of one machine's local file system.
func checkFileSystem(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	return refuseFileSystem(int64(st.Type))
}

func refuseFileSystem(magic int64) error {
	name, ok := map[int64]string{
		unix.NFS_SUPER_MAGIC:  "NFS",
		unix.SMB_SUPER_MAGIC:  "SMB",
		unix.SMB2_SUPER_MAGIC: "SMB",
		unix.CIFS_SUPER_MAGIC: "CIFS",
	}[magic]
	if ok {
		return fmt.Errorf("is on %s, a network file system: bucket-fs serves the processes of one machine from a local file system (use bucket-s3 to share a bucket between machines)", name)
	}
	return nil
}
