// Package memdb is a storage.Driver whose databases are pages in memory,
// for the cluster's tests and its simulation: each database is a file of
// pages and a log of the transactions committed since the last checkpoint,
// as SQLite's WAL holds them. Capture reads the log from a position,
// Checkpoint folds it into the file only when nothing in it is uncaptured,
// and a database opened again is captured from the start of its log. It
// runs no SQL: a test commits pages (Commit).
package memdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// PageSize is every database's page size.
const PageSize = 512

type txn struct {
	size  uint32
	pages map[uint32][]byte
}

type store struct {
	file     [][]byte
	log      []txn
	replaced [][]byte
	open     *DB
}

// state is the database as its last commit leaves it.
func (s *store) state() [][]byte {
	st := slices.Clone(s.file)
	for _, t := range s.log {
		for uint32(len(st)) < t.size {
			st = append(st, make([]byte, PageSize))
		}
		st = st[:t.size]
		for p, d := range t.pages {
			st[p-1] = d
		}
	}
	return st
}

// Driver is one node's data directory of databases.
type Driver struct {
	mu     sync.Mutex
	stores map[abi.Address]*store
}

var _ storage.Driver = (*Driver)(nil)

// New returns an empty data directory.
func New() *Driver { return &Driver{stores: map[abi.Address]*store{}} }

func (d *Driver) create(addr abi.Address) *store {
	s := d.stores[addr]
	if s == nil {
		s = &store{}
		d.stores[addr] = s
	}
	return s
}

// Open opens addr's database (created empty if absent); only with
// Options.Replication.
func (d *Driver) Open(_ context.Context, _ string, addr abi.Address, opts storage.Options) (storage.DB, error) {
	if !opts.Replication {
		return nil, errors.New("memdb: a database is opened for replication only")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.create(addr)
	if s.open != nil {
		return nil, storage.ErrOpen
	}
	s.open = &DB{d: d, s: s}
	return s.open, nil
}

func (d *Driver) Exists(_ context.Context, _ string, addr abi.Address) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stores[addr] != nil, nil
}

func (d *Driver) Remove(_ context.Context, _ string, addr abi.Address) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.stores[addr]; s != nil && s.open != nil {
		return storage.ErrOpen
	}
	delete(d.stores, addr)
	return nil
}

// Restore replaces addr's database with src's pages, keeping the old one
// (Replaced).
func (d *Driver) Restore(_ context.Context, _ string, addr abi.Address, src io.Reader) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	if len(b)%PageSize != 0 {
		return fmt.Errorf("memdb: a database of %d bytes is not whole pages", len(b))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.create(addr)
	if s.open != nil {
		return storage.ErrOpen
	}
	s.replaced, s.file, s.log = s.state(), nil, nil
	for ; len(b) > 0; b = b[PageSize:] {
		s.file = append(s.file, bytes.Clone(b[:PageSize]))
	}
	return nil
}

func (d *Driver) Snapshot(_ context.Context, _ string, addr abi.Address, w io.Writer) error {
	d.mu.Lock()
	s := d.stores[addr]
	var st [][]byte
	if s != nil {
		st = s.state()
	}
	d.mu.Unlock()
	if s == nil {
		return fmt.Errorf("memdb: %s: %w", addr, fs.ErrNotExist)
	}
	for _, p := range st {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) Walk(context.Context, string, string, storage.Options, func(storage.Found) error) error {
	return nil
}

// Pages is addr's database as its last commit leaves it (nil if absent).
func (d *Driver) Pages(addr abi.Address) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.stores[addr]; s != nil {
		return s.state()
	}
	return nil
}

// Has reports whether addr has a database.
func (d *Driver) Has(addr abi.Address) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stores[addr] != nil
}

// Replaced is the database addr's last Restore set aside.
func (d *Driver) Replaced(addr abi.Address) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.stores[addr]; s != nil {
		return s.replaced
	}
	return nil
}

// CloseAll closes every open database, as a process's exit does.
func (d *Driver) CloseAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.stores {
		if s.open != nil {
			s.open.closed, s.open = true, nil
		}
	}
}

// DB is an open database.
type DB struct {
	d           *Driver
	s           *store
	pos         int   // log entries captured
	failCapture error // the next capture's error
	closed      bool
}

var _ storage.DB = (*DB)(nil)

var errClosed = errors.New("memdb: the database is closed")

// Commit commits one transaction: the database size pages long after it
// (0: as before, grown to the highest page written), pages written.
func (db *DB) Commit(size uint32, pages map[uint32][]byte) error {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	if db.closed {
		return errClosed
	}
	if size == 0 {
		size = uint32(len(db.s.state()))
		for p := range pages {
			size = max(size, p)
		}
	}
	t := txn{size: size, pages: map[uint32][]byte{}}
	for p, data := range pages {
		if len(data) != PageSize || p == 0 || p > size {
			return fmt.Errorf("memdb: page %d of %d bytes in a database of %d pages", p, len(data), size)
		}
		t.pages[p] = bytes.Clone(data)
	}
	db.s.log = append(db.s.log, t)
	return nil
}

// FailNextCapture makes the next Capture or CaptureAll fail with err,
// its position left where it was.
func (db *DB) FailNextCapture(err error) {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	db.failCapture = err
}

// MarkCaptured moves the capture position past every commit, as if they
// had been captured (a database whose log the kernel already shipped).
func (db *DB) MarkCaptured() {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	db.pos = len(db.s.log)
}

// Replaced is the database the last Restore of this one set aside.
func (db *DB) Replaced() [][]byte {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	return db.s.replaced
}

// Pages is the database as its last commit leaves it.
func (db *DB) Pages() [][]byte {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	return db.s.state()
}

func (db *DB) capture(all bool, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	db.d.mu.Lock()
	if err := db.failCapture; err != nil || db.closed {
		db.failCapture = nil
		db.d.mu.Unlock()
		if err == nil {
			err = errClosed
		}
		return storage.CaptureInfo{}, err
	}
	txns := db.s.log[db.pos:]
	st := db.s.state()
	n := len(db.s.log)
	var pgnos []uint32
	info := storage.CaptureInfo{PageSize: PageSize, Pages: uint32(len(st)), Transactions: len(txns)}
	switch {
	case all:
		for p := range info.Pages {
			pgnos = append(pgnos, p+1)
		}
	default:
		for _, t := range txns {
			for p := range t.pages {
				if p <= info.Pages && !slices.Contains(pgnos, p) {
					pgnos = append(pgnos, p)
				}
			}
		}
		slices.Sort(pgnos)
	}
	db.d.mu.Unlock()
	for _, p := range pgnos {
		if err := page(p, bytes.Clone(st[p-1])); err != nil {
			return storage.CaptureInfo{}, err
		}
		info.Changed++
	}
	db.d.mu.Lock()
	db.pos = n
	db.d.mu.Unlock()
	return info, nil
}

func (db *DB) Capture(_ context.Context, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	return db.capture(false, page)
}

func (db *DB) CaptureAll(_ context.Context, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	return db.capture(true, page)
}

func (db *DB) Checkpoint(context.Context) error {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	if db.closed {
		return errClosed
	}
	if db.pos == len(db.s.log) {
		db.s.file, db.s.log, db.pos = db.s.state(), nil, 0
	}
	return nil
}

func (db *DB) Close() error {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	if !db.closed {
		db.closed = true
		if db.s.open == db {
			db.s.open = nil
		}
	}
	return nil
}

var errNoSQL = errors.New("memdb: no SQL")

func (db *DB) Exec(context.Context, string, []abi.Value, storage.ExecOptions) (int64, error) {
	return 0, errNoSQL
}

func (db *DB) Query(context.Context, string, []abi.Value, *abi.RowsWriter) error { return errNoSQL }

func (db *DB) HostExec(context.Context, string, ...abi.Value) (int64, error) { return 0, errNoSQL }

func (db *DB) HostQuery(context.Context, string, []abi.Value, *abi.RowsWriter) error {
	return errNoSQL
}

func (db *DB) InTransaction() bool            { return false }
func (db *DB) EndEvent(context.Context) error { return nil }
