package sqlitestorage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/atomicfile"

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Templates (storage.Preparation): a database Open creates starts as a copy
// of one the driver prepared once by running the preparation's statements,
// rather than being built statement by statement. The template is an
// ordinary database of this driver, opened with the plugin's own settings
// (WAL mode marked in its header, the default page size), the statements
// run on it as the host, then checkpointed, so the file alone holds it. A
// copy is what the statements would have built: the same pages, byte for
// byte, and the copy's first write starts a log of its own.
//
// One template per preparation is kept in memory for the driver's lifetime
// and, under the preparation's CacheDir, in a file that survives restarts:
//
//	<CacheDir>/storage-sqlite/<key>.template
//
// where key is the SHA-256, in hex, of the template's format, the driver,
// the SQLite it links (sqlite_source_id) and the statements: other
// statements or another SQLite make another key, so a stale template is
// never found. The file is a header, then the database:
//
//	wasmkeep sqlite template 1\n
//	<key>\n
//	<SHA-256 of the database, in hex>\n
//	<the database file>
//
// It is written to a temporary file, fsynced, then renamed into place, so
// a reader finds a whole file or none; one whose header is not this one,
// whose key is not the one it is looked up by, whose database does not
// have its checksum or is not a WAL-mode SQLite file is made again (and
// replaces it). Without a CacheDir, or when a template cannot be made or
// stored, Open runs the statements on each new database instead.
const (
	templateMagic  = "wasmkeep sqlite template 1\n"
	templateSuffix = ".template"
	templateDir    = "storage-sqlite"
	// creatingSuffix, and a number, name a new database copied from a
	// template until it is linked into place (copyTemplate).
	creatingSuffix = ".creating"
)

// templates are a driver's prepared databases, by key.
type templates struct {
	mu      sync.Mutex
	byKey   map[string]*template
	srcOnce sync.Once
	source  string // sqlite_source_id(), part of every key
	srcErr  error
	builds  int // templates made (not read from the cache), for tests
}

// template is one preparation's database, or why there is none this
// process (tried once: a failure falls back to running the statements).
type template struct {
	mu   sync.Mutex // held while it is read or made
	done bool
	data []byte
	err  error
}

// templateKey is the cache key of a preparation for this driver.
func (drv *driver) templateKey(stmts []string) (string, error) {
	t := &drv.tpl
	t.srcOnce.Do(func() {
		t.srcErr = drv.bareMemory(func(c conn) error {
			v, err := pragmaOn(c, "SELECT sqlite_source_id()")
			t.source = string(v.Bytes)
			return err
		})
	})
	if t.srcErr != nil {
		return "", t.srcErr
	}
	h := sha256.New()
	for _, part := range append([]string{templateMagic, drv.cfg.Driver, t.source}, stmts...) {
		// Each part's length first, so no two lists hash alike.
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// bareMemory runs f on a connection to an in-memory database.
func (drv *driver) bareMemory(f func(conn) error) error {
	c, err := drv.b.open(":memory:")
	if err != nil {
		return err
	}
	return errors.Join(f(c), c.close())
}

// template returns the database to copy for prep, reading it from the cache
// or making it the first time; nil (and the reason) when there is none,
// and the caller runs the statements instead. Concurrent first calls for
// one preparation make one template.
func (drv *driver) template(prep storage.Preparation) ([]byte, error) {
	if prep.CacheDir == "" {
		return nil, errors.New("no cache directory")
	}
	key, err := drv.templateKey(prep.Statements)
	if err != nil {
		return nil, err
	}
	t := &drv.tpl
	t.mu.Lock()
	if t.byKey == nil {
		t.byKey = map[string]*template{}
	}
	e := t.byKey[key]
	if e == nil {
		e = &template{}
		t.byKey[key] = e
	}
	t.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.done {
		e.data, e.err = drv.loadTemplate(filepath.Join(prep.CacheDir, templateDir), key, prep.Statements)
		e.done = true
	}
	return e.data, e.err
}

// loadTemplate reads the template of key from dir, or makes it if it is
// missing or not to be trusted.
func (drv *driver) loadTemplate(dir, key string, stmts []string) ([]byte, error) {
	path := filepath.Join(dir, key+templateSuffix)
	if raw, err := os.ReadFile(path); err == nil {
		if data, err := parseTemplate(raw, key); err == nil {
			return data, nil
		}
	}
	data, err := drv.makeTemplate(dir, stmts)
	if err != nil {
		return nil, fmt.Errorf("making the template of new databases in %s: %w", dir, err)
	}
	if err := storeTemplate(path, key, data); err != nil {
		return nil, fmt.Errorf("storing the template of new databases: %w", err)
	}
	drv.tpl.mu.Lock()
	drv.tpl.builds++
	drv.tpl.mu.Unlock()
	return data, nil
}

// parseTemplate checks a template file read for key and returns its
// database.
func parseTemplate(raw []byte, key string) ([]byte, error) {
	rest, ok := bytes.CutPrefix(raw, []byte(templateMagic))
	if !ok {
		return nil, errors.New("not a template")
	}
	lines := bytes.SplitN(rest, []byte("\n"), 3)
	if len(lines) != 3 || string(lines[0]) != key {
		return nil, errors.New("a template of another preparation")
	}
	data := lines[2]
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != string(lines[1]) {
		return nil, errors.New("the template's database does not have its checksum")
	}
	return data, checkTemplateDB(data)
}

// checkTemplateDB checks that data is a whole database file in WAL mode
// (https://www.sqlite.org/fileformat2.html#the_database_header).
func checkTemplateDB(data []byte) error {
	if len(data) < 100 || string(data[:16]) != "SQLite format 3\x00" {
		return errors.New("not a SQLite database")
	}
	pageSize := int(binary.BigEndian.Uint16(data[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	switch {
	case data[18] != 2 || data[19] != 2:
		return errors.New("not in WAL mode")
	case pageSize < 512 || pageSize&(pageSize-1) != 0 || len(data)%pageSize != 0:
		return fmt.Errorf("%d bytes is no whole number of %d-byte pages", len(data), pageSize)
	case binary.BigEndian.Uint32(data[28:])*uint32(pageSize) != uint32(len(data)):
		return errors.New("its size is not the one its header gives")
	}
	return nil
}

// makeTemplate builds the template in a scratch directory under dir and
// returns its database file.
func (drv *driver) makeTemplate(dir string, stmts []string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(dir, "making-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	path := filepath.Join(scratch, "template"+dbSuffix)
	d, err := drv.open(path, -1, storage.Options{}.Defaults())
	if err != nil {
		return nil, err
	}
	err = d.runPreparation(stmts)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := drv.checkpoint(path); err != nil {
		return nil, err
	}
	if err := drv.check(path); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := checkTemplateDB(data); err != nil {
		return nil, fmt.Errorf("the template made: %w", err)
	}
	return data, nil
}

// runPreparation runs a preparation's statements as the host.
func (d *db) runPreparation(stmts []string) error {
	for _, sql := range stmts {
		if _, err := d.HostExec(context.Background(), sql); err != nil {
			return fmt.Errorf("%s: %w", clip(strings.TrimSpace(sql)), err)
		}
	}
	return nil
}

// storeTemplate writes the template file at path, whole or not at all.
func storeTemplate(path, key string, data []byte) error {
	sum := sha256.Sum256(data)
	var b bytes.Buffer
	b.WriteString(templateMagic + key + "\n" + hex.EncodeToString(sum[:]) + "\n")
	b.Write(data)
	return atomicfile.Write(path, b.Bytes())
}

// made is what create did at a path.
type made struct {
	created bool // the path held no database: this Open makes it
	run     bool // without a template: the statements are left to run
	lockFD  int  // the new file's lock (lockBytes), taken before anything else could open it; -1: none
}

// create starts the database at path, which is claimed, as a copy of
// prep's template if path holds none, or as an empty file if the driver
// has no template. Either is locked from the start, so a database another
// process made meanwhile (a second server on this data directory) is
// found, neither taken for a new one nor replaced.
func (drv *driver) create(path string, prep storage.Preparation) (made, error) {
	if _, err := os.Lstat(path); err == nil {
		return made{lockFD: -1}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return made{lockFD: -1}, err
	}
	data, err := drv.template(prep)
	if err != nil {
		return createEmpty(path)
	}
	return copyTemplate(path, data)
}

// createEmpty creates the empty file SQLite makes a new database of at
// path, locked; a file there already is found.
func createEmpty(path string) (made, error) {
	fd, err := lockDBFile(path, true)
	if err != nil {
		return made{lockFD: -1}, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return made{lockFD: -1}, fmt.Errorf("open %s: %w", path, err)
	}
	return made{created: st.Size == 0, run: st.Size == 0, lockFD: fd}, nil
}

// copyTemplate makes the database at path a copy of data. The copy is
// written to a file of its own (<path>.creating-<n>, no other process's),
// fsynced and locked (lockBytes), then linked at path: link(2) fails if
// anything is there by then, which is found. Only then are the logs a
// database removed by hand may have left beside path removed: path is this
// process's, and no SQLite has it open. A crash between the copy's
// creation and its unlink leaves the copy, which nothing reads (Walk takes
// only .db files).
func copyTemplate(path string, data []byte) (made, error) {
	found := made{lockFD: -1}
	fd, tmp, err := createUnique(path + creatingSuffix)
	if err != nil {
		return found, fmt.Errorf("open %s: copying the template: %w", path, err)
	}
	err = writeLocked(fd, data)
	if err == nil {
		err = placeNew(tmp, path)
	}
	os.Remove(tmp)
	if errors.Is(err, unix.EEXIST) {
		unix.Close(fd)
		return found, nil
	}
	// A log left beside a database that is gone must not be replayed
	// into the new one (Remove removes the log first). A stat each, as
	// os.Remove of an absent file costs two system calls. (SQLite deletes
	// a log beside an empty file itself: createEmpty needs none of this.)
	for _, f := range suffixed(path, logSuffixes) {
		if err != nil {
			break
		}
		if _, serr := os.Lstat(f); serr == nil {
			if err = os.Remove(f); err != nil {
				os.Remove(path) // this process's copy, still locked: the next open starts again
			}
		}
	}
	if err != nil {
		unix.Close(fd)
		return found, fmt.Errorf("open %s: copying the template: %w", path, err)
	}
	return made{created: true, lockFD: fd}, nil
}

// createUnique creates a new file named prefix-<n> for writing, n chosen
// so that no other file has the name, and returns it open.
func createUnique(prefix string) (fd int, name string, err error) {
	for range 100 {
		name = prefix + "-" + strconv.FormatUint(rand.Uint64(), 36)
		fd, err = openNoEINTR(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
		if !errors.Is(err, unix.EEXIST) {
			return fd, name, err
		}
	}
	return -1, "", err
}

// writeLocked writes data to the new file open at fd, fsyncs it and takes
// its lock (lockBytes), with plain system calls: an *os.File would close
// the descriptor, which the connection keeps, when collected.
func writeLocked(fd int, data []byte) error {
	var err error
	for len(data) > 0 && err == nil {
		var n int
		err = noEINTR(func() (err error) { n, err = unix.Write(fd, data); return err })
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		} else if err == nil {
			data = data[n:]
		}
	}
	if err == nil {
		err = noEINTR(func() error { return unix.Fsync(fd) })
	}
	if err == nil {
		err = lockBytes(fd)
	}
	return err
}

// placeNew gives the file named tmp the name path too, unless path exists
// (EEXIST then): link(2) refuses an existing name on any POSIX file
// system, NFS included. One without hard links gets rename(2), which
// would replace a database another process made at that moment.
func placeNew(tmp, path string) error {
	err := noEINTR(func() error { return unix.Link(tmp, path) })
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
		err = noEINTR(func() error { return unix.Rename(tmp, path) })
	}
	return err
}
