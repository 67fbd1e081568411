package fsbucket

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockShards is how many lock files the keys are spread over: writes of
// keys in different shards never wait for each other.
const lockShards = 64

// shards are the bucket's write locks. A conditional write holds its key's
// shard from the check of the condition to the durable rename, which makes
// the pair atomic for every process that opened the directory.
type shards struct {
	mu    [lockShards]sync.Mutex
	files [lockShards]*os.File // nil once closed
	done  atomic.Bool
}

func openShards(dir string) (*shards, error) {
	s := &shards{}
	for i := range s.files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%02x", i)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			s.close()
			return nil, err
		}
		s.files[i] = f
	}
	return s, nil
}

// lock takes key's shard: the mutex among this bucket's goroutines, then
// flock among processes. A flock belongs to an open file description, so it
// also excludes another Open of the same directory in this process.
func (s *shards) lock(key string) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	i := h.Sum32() % lockShards
	s.mu[i].Lock()
	f := s.files[i]
	if f == nil {
		s.mu[i].Unlock()
		return nil, errClosed
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		s.mu[i].Unlock()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() {
		flock(f, syscall.LOCK_UN) // closing the file would release it too
		s.mu[i].Unlock()
	}, nil
}

// close waits for each shard's holder, then closes its file.
func (s *shards) close() {
	if s.done.Swap(true) {
		return
	}
	for i := range s.files {
		s.mu[i].Lock()
		if s.files[i] != nil {
			s.files[i].Close()
			s.files[i] = nil
		}
		s.mu[i].Unlock()
	}
}

func (s *shards) closed() bool { return s.done.Load() }

func flock(f *os.File, how int) error {
	for {
		if err := syscall.Flock(int(f.Fd()), how); err != syscall.EINTR {
			return err
		}
	}
}

// staleAfter is how long a temporary file must be untouched before
// cleanTemps considers it. A writer flocks its temporary file right after
// creating it, so only a file that is old and unlocked was left by a writer
// that died.
const staleAfter = time.Minute

// cleanTemps removes the temporary files of writers that died mid-write.
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

// checkFileSystem refuses network file systems: bucket-fs relies on flock
// and rename being exact for every process that opens the directory, which
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
