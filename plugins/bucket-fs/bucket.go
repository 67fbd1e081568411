package fsbucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The directory's layout. An object is a regular file at <dir>/<key> (a key
// is a path of valid file names: the key rule rules out "", "." and "..").
// Its first headerLen bytes are the magic and 16 random bytes, the object's
// version; the object's bytes follow. Files are never changed in place: a
// write fills a temporary file, fsyncs it and renames it over the key, so an
// open file keeps the version and bytes it was opened with. An empty
// directory at a key is no object (a delete leaves one for a moment). The
// bucket's own files are under metaDir, a name no key can have ('@' is
// outside the key rule). Files and directories are the owner's alone (0600,
// 0700): every node sharing the directory runs as one user.
const (
	magic     = "wkbucket"
	headerLen = int64(len(magic) + 16)
	metaDir   = "@fsbucket"

	// pageSize is List's page when the caller gives no Limit.
	pageSize = 1000
	// pruneRetries bounds how often a write recreates a parent directory
	// that a concurrent delete removed as empty.
	pruneRetries = 20
)

var errClosed = errors.New("bucket-fs: the bucket is closed")

type fsBucket struct {
	root  string // absolute
	tmp   string // temporary files of writes in progress
	locks *shards
}

var _ bucket.Bucket = (*fsBucket)(nil)

// Open opens (creating it if needed) the bucket in dir. It refuses a network
// file system (NFS, SMB) and one whose names ignore case (keys A and a would
// be one file), and it removes temporary files that crashed writers left
// behind.
func Open(dir string) (bucket.Bucket, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bucket-fs: dir %q: %w", dir, err)
	}
	b := &fsBucket{root: root, tmp: filepath.Join(root, metaDir, "tmp")}
	shardDir := filepath.Join(root, metaDir, "shards")
	for _, d := range []string{b.tmp, shardDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("bucket-fs: %w", err)
		}
	}
	if err := checkFileSystem(root); err != nil {
		return nil, fmt.Errorf("bucket-fs: dir %s: %w", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, metaDir, "SHARDS")); err == nil {
		return nil, fmt.Errorf("bucket-fs: dir %s: the file system ignores case in names, so keys that differ only in case would be one file; use a case-sensitive one", root)
	}
	if err := checkExchange(b.tmp); err != nil {
		return nil, fmt.Errorf("bucket-fs: dir %s: %w", root, err)
	}
	if err := cleanTemps(b.tmp); err != nil {
		return nil, fmt.Errorf("bucket-fs: %w", err)
	}
	b.locks = openShards(shardDir, b.tmp)
	return b, nil
}

func (b *fsBucket) path(key string) string { return b.root + "/" + key }

func (b *fsBucket) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if err := b.begin(ctx, key); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	f, info, v, err := b.open(key)
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	size := info.Size() - headerLen
	off, n, err := span(opts, size)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	return &bucket.Object{
		Body:    readCloser{io.NewSectionReader(f, headerLen+off, n), f},
		Size:    size,
		Version: v,
		ModTime: info.ModTime(),
	}, nil
}

// span turns a GetOptions into the offset and length to read (the
// contract's rule: a range starts inside the object, 0/0 is the whole).
func span(opts bucket.GetOptions, size int64) (off, n int64, err error) {
	switch {
	case opts.Offset < 0 || opts.Length < 0:
		return 0, 0, fmt.Errorf("%w: offset %d, length %d", bucket.ErrRange, opts.Offset, opts.Length)
	case opts.Offset == 0 && opts.Length == 0:
		return 0, size, nil
	case opts.Offset >= size:
		return 0, 0, fmt.Errorf("%w: offset %d of a %d-byte object", bucket.ErrRange, opts.Offset, size)
	case opts.Length == 0 || opts.Length > size-opts.Offset:
		return opts.Offset, size - opts.Offset, nil
	}
	return opts.Offset, opts.Length, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (b *fsBucket) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	v, err := b.put(ctx, key, body, size, cond)
	if err != nil {
		return "", fmt.Errorf("put %q: %w", key, err)
	}
	return v, nil
}

func (b *fsBucket) put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if err := b.begin(ctx, key); err != nil {
		return "", err
	}
	if err := cond.Check(); err != nil {
		return "", err
	}
	// Fail before streaming the body when the condition already fails; the
	// check under the lock is the one that counts.
	if err := b.holds(key, cond); err != nil {
		return "", err
	}
	tmp, v, err := b.writeTemp(ctx, body, size)
	if err != nil {
		return "", err
	}
	defer func() {
		os.Remove(tmp.Name()) // an installed object keeps its other name
		tmp.Close()           // releases the temporary file's flock
	}()
	err = b.locked(ctx, key,
		func(path string) error { return os.Link(tmp.Name(), path) },
		func() error { return b.holds(key, cond) },
		func(entry string) error { return b.install(entry, key) })
	if err != nil {
		return "", err
	}
	// A delete of the key since may have removed the directory, and made
	// that durable itself.
	if err := syncDir(filepath.Dir(b.path(key))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return v, nil
}

// testHookChecked, when set (by tests only), runs once a write's condition
// held under the lock, before the write: the worst moment to freeze.
var testHookChecked func()

// locked runs a write under key's lock: check, then change through the
// entry that stage made. When another process broke the lock before the
// change (errStolen), the write starts over, its condition checked again.
func (b *fsBucket) locked(ctx context.Context, key string, stage func(path string) error, check func() error, change func(entry string) error) error {
	for {
		entry, release, err := b.locks.lock(ctx, key, stage)
		if err == nil {
			err = check()
			if err == nil && testHookChecked != nil {
				testHookChecked()
			}
			if err == nil {
				err = change(entry)
			}
			release()
		}
		if !errors.Is(err, errStolen) {
			return err
		}
	}
}

// holds checks a Put's condition against the object as it is now.
func (b *fsBucket) holds(key string, cond bucket.Condition) error {
	if cond == (bucket.Condition{}) {
		return nil
	}
	v, err := b.version(key)
	switch {
	case errors.Is(err, bucket.ErrNotFound) && cond.IfAbsent:
		return nil
	case errors.Is(err, bucket.ErrNotFound):
		return fmt.Errorf("%w: no object to replace at version %s", bucket.ErrPrecondition, cond.IfVersion)
	case err != nil:
		return err
	case cond.IfAbsent:
		return fmt.Errorf("%w: the object exists", bucket.ErrPrecondition)
	case v != cond.IfVersion:
		return fmt.Errorf("%w: the object is at version %s, not %s", bucket.ErrPrecondition, v, cond.IfVersion)
	}
	return nil
}

// writeTemp streams the object into a new temporary file and fsyncs it. The
// file is flocked while its writer lives, which tells cleanTemps it is not
// litter.
func (b *fsBucket) writeTemp(ctx context.Context, body io.Reader, size int64) (*os.File, bucket.Version, error) {
	f, err := os.CreateTemp(b.tmp, "put-")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*os.File, bucket.Version, error) {
		os.Remove(f.Name())
		f.Close()
		return nil, "", err
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(err)
	}
	hdr := make([]byte, headerLen)
	copy(hdr, magic)
	rand.Read(hdr[len(magic):])
	if _, err := f.Write(hdr); err != nil {
		return fail(err)
	}
	if _, err := io.Copy(f, ctxReader{ctx, bucket.SizedBody(body, size)}); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	return f, versionOf(hdr), nil
}

func versionOf(hdr []byte) bucket.Version {
	return bucket.Version(hex.EncodeToString(hdr[len(magic):headerLen]))
}

// ctxReader stops a stream when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// install renames the staged entry, a hard link to a written temporary
// file, over key, which also releases the lock. It fails with errStolen if
// the lock was broken first.
func (b *fsBucket) install(entry, key string) error {
	path := b.path(key)
	for attempt := 0; ; attempt++ {
		err := b.mkdirs(key)
		if err == nil {
			err = rename(entry, path)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EISDIR) && attempt < pruneRetries:
			// An empty directory is what a delete leaves for a moment
			// (any other, the parent of other keys, stays).
			syscall.Rmdir(path)
		case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			return fmt.Errorf("%w: bucket-fs cannot hold a key both as an object and as the parent of others (%s)", bucket.ErrInvalidKey, err)
		case !errors.Is(err, fs.ErrNotExist) || attempt == pruneRetries:
			return err
		case gone(entry):
			return errStolen
		}
		// A delete removed a parent directory as empty: make it again.
	}
}

// mkdirs makes key's parent directories, each made one durable in its
// parent.
func (b *fsBucket) mkdirs(key string) error {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return nil
	}
	if info, err := os.Stat(b.path(key[:i])); err == nil && info.IsDir() {
		return nil
	}
	for j := 0; j <= i; j++ {
		if j < i && key[j] != '/' {
			continue
		}
		err := os.Mkdir(b.path(key[:j]), 0o700)
		if err == nil {
			err = syncDir(filepath.Dir(b.path(key[:j])))
		} else if errors.Is(err, fs.ErrExist) {
			// A directory someone made, or an object where a directory is
			// needed (then the rename fails with ENOTDIR).
			err = nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *fsBucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := b.delete(ctx, key, cond); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	return nil
}

func (b *fsBucket) delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := b.begin(ctx, key); err != nil {
		return err
	}
	if cond.IfAbsent {
		return errors.New("a delete cannot be conditional on the object being absent")
	}
	// Under the lock, exchange the object with the staged empty directory:
	// a removal that, like a rename, fails once the lock is broken (an
	// unlink would not).
	err := b.locked(ctx, key,
		func(path string) error { return os.Mkdir(path, 0o700) },
		func() error {
			v, err := b.version(key)
			if err == nil && cond.IfVersion != "" && v != cond.IfVersion {
				err = fmt.Errorf("%w: the object is at version %s, not %s", bucket.ErrPrecondition, v, cond.IfVersion)
			}
			return err
		},
		func(entry string) error {
			err := unix.Renameat2(unix.AT_FDCWD, entry, unix.AT_FDCWD, b.path(key), unix.RENAME_EXCHANGE)
			switch {
			case err == nil:
				return nil
			case gone(entry):
				return errStolen
			}
			return fmt.Errorf("exchange %s with %s: %w", entry, b.path(key), err)
		})
	if err != nil {
		return err
	}
	// Remove the empty directory now at the key (unless a write replaced
	// it meanwhile) and the parents the delete left empty, then make the
	// removal durable in the deepest directory that remains. Other deletes
	// may remove the same parents meanwhile, and a write that needs a
	// removed parent makes it again (install).
	syscall.Rmdir(b.path(key))
	for dir := filepath.Dir(b.path(key)); ; dir = filepath.Dir(dir) {
		if dir == b.root {
			return syncDir(dir)
		}
		if err := syscall.Rmdir(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := syncDir(dir); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
}

func (b *fsBucket) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	page, err := b.list(ctx, prefix, opts)
	if err != nil {
		return bucket.ListPage{}, fmt.Errorf("list %q: %w", prefix, err)
	}
	return page, nil
}

func (b *fsBucket) list(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if b.locks.closed() {
		return bucket.ListPage{}, errClosed
	}
	if err := ctx.Err(); err != nil {
		return bucket.ListPage{}, err
	}
	if err := bucket.CheckPrefix(prefix); err != nil {
		return bucket.ListPage{}, err
	}
	limit := opts.Limit
	switch {
	case limit < 0:
		return bucket.ListPage{}, fmt.Errorf("limit is %d", limit)
	case limit == 0:
		limit = pageSize
	}
	// Every key under prefix lies under prefix's directory part.
	base := prefix[:strings.LastIndexByte(prefix, '/')+1]
	l := lister{b: b, ctx: ctx, prefix: prefix, after: opts.StartAfter, want: limit + 1}
	if err := l.walk(base); err != nil {
		return bucket.ListPage{}, err
	}
	page := bucket.ListPage{Entries: l.entries}
	if len(page.Entries) > limit {
		page.Entries = page.Entries[:limit]
		page.Next = page.Entries[limit-1].Key
	}
	return page, nil
}

// lister walks the tree depth first in key order. In a directory, an
// object sorts by its name and a subdirectory by its name and "/", the
// least string its keys start with; since a name holds no "/", every key
// under the subdirectory sorts before the next entry, so the walk yields
// keys in byte order.
type lister struct {
	b             *fsBucket
	ctx           context.Context
	prefix, after string
	want          int
	entries       []bucket.Entry
}

// walk lists the directory of keys starting with dir ("" or ending in "/").
func (l *lister) walk(dir string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(l.b.path(dir))
	if err != nil {
		if notExist(err) { // never made, or removed by a delete meanwhile
			return nil
		}
		return err
	}
	type item struct {
		key   string // for a directory, ending in "/"
		isDir bool
	}
	items := make([]item, 0, len(des))
	for _, de := range des {
		key := dir + de.Name()
		if bucket.CheckKey(key) != nil {
			continue // the bucket's own files, or a name no key can have
		}
		switch {
		case de.IsDir():
			items = append(items, item{key + "/", true})
		case de.Type().IsRegular():
			items = append(items, item{key, false})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.key, b.key) })
	for _, it := range items {
		if len(l.entries) == l.want {
			return nil
		}
		if it.isDir {
			inPrefix := strings.HasPrefix(it.key, l.prefix) || strings.HasPrefix(l.prefix, it.key)
			allBefore := l.after >= it.key && !strings.HasPrefix(l.after, it.key)
			if inPrefix && !allBefore {
				if err := l.walk(it.key); err != nil {
					return err
				}
			}
			continue
		}
		if !strings.HasPrefix(it.key, l.prefix) || it.key <= l.after {
			continue
		}
		f, info, v, err := l.b.open(it.key)
		if errors.Is(err, bucket.ErrNotFound) {
			continue // deleted since the directory was read
		}
		if err != nil {
			return err
		}
		f.Close()
		l.entries = append(l.entries, bucket.Entry{Key: it.key, Size: info.Size() - headerLen, Version: v, ModTime: info.ModTime()})
	}
	return nil
}

func (b *fsBucket) Close() error {
	b.locks.close()
	return nil
}

// begin refuses work on a closed bucket, after ctx ended, or on an invalid
// key.
func (b *fsBucket) begin(ctx context.Context, key string) error {
	if b.locks.closed() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return bucket.CheckKey(key)
}

// open opens key's object and reads its header: the file, its stat and the
// object's version, which names exactly the bytes the file holds.
func (b *fsBucket) open(key string) (*os.File, fs.FileInfo, bucket.Version, error) {
	// unix.Open, not os.Open: a regular file needs no poller, and skipping
	// its registration saves a system call per listed entry.
	path := b.path(key)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if notExist(err) {
		return nil, nil, "", bucket.ErrNotFound
	}
	if err != nil {
		return nil, nil, "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	info, err := f.Stat()
	if err == nil && info.IsDir() {
		err = bucket.ErrNotFound // the parent of other keys, not an object
	}
	hdr := make([]byte, headerLen)
	if err == nil {
		if _, err = f.ReadAt(hdr, 0); errors.Is(err, io.EOF) || err == nil && string(hdr[:len(magic)]) != magic {
			err = fmt.Errorf("%s is not a bucket-fs object (no %q header)", f.Name(), magic)
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, "", err
	}
	return f, info, versionOf(hdr), nil
}

// version is key's current version.
func (b *fsBucket) version(key string) (bucket.Version, error) {
	f, _, v, err := b.open(key)
	if err != nil {
		return "", err
	}
	f.Close()
	return v, nil
}

func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// syncDir makes the entries of a directory durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
