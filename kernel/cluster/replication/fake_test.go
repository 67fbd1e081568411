package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The fakes: a storage.Driver whose databases are pages in memory, with a
// log of committed transactions the way the SQLite plugin's WAL holds them
// (captured from a position, folded into the file only by a checkpoint
// with nothing uncaptured, captured again from the start after a reopen).

const pageSize = 512

type txn struct {
	size  uint32
	pages map[uint32][]byte
}

type store struct {
	file     [][]byte
	log      []txn
	replaced [][]byte
	open     bool
}

// state is the database as its last commit leaves it.
func (s *store) state() [][]byte {
	st := slices.Clone(s.file)
	for _, t := range s.log {
		st = apply(st, t)
	}
	return st
}

func apply(st [][]byte, t txn) [][]byte {
	for uint32(len(st)) < t.size {
		st = append(st, make([]byte, pageSize))
	}
	st = st[:t.size]
	for p, d := range t.pages {
		st[p-1] = d
	}
	return st
}

type fakeDriver struct {
	mu     sync.Mutex
	stores map[abi.Address]*store
}

func newDriver() *fakeDriver { return &fakeDriver{stores: map[abi.Address]*store{}} }

func (d *fakeDriver) store(addr abi.Address) *store {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stores[addr]
}

// create is addr's store, created empty if absent; d.mu is held.
func (d *fakeDriver) create(addr abi.Address) *store {
	s := d.stores[addr]
	if s == nil {
		s = &store{}
		d.stores[addr] = s
	}
	return s
}

func (d *fakeDriver) Open(_ context.Context, _ string, addr abi.Address, opts storage.Options) (storage.DB, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.create(addr)
	if s.open {
		return nil, storage.ErrOpen
	}
	if !opts.Replication {
		return nil, errors.New("fake: opened without replication")
	}
	s.open = true
	return &fakeDB{d: d, s: s}, nil
}

func (d *fakeDriver) Exists(_ context.Context, _ string, addr abi.Address) (bool, error) {
	return d.store(addr) != nil, nil
}

func (d *fakeDriver) Remove(_ context.Context, _ string, addr abi.Address) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.stores, addr)
	return nil
}

func (d *fakeDriver) Restore(_ context.Context, _ string, addr abi.Address, src io.Reader) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	if len(b)%pageSize != 0 {
		return fmt.Errorf("fake: a database of %d bytes", len(b))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.create(addr)
	if s.open {
		return storage.ErrOpen
	}
	s.replaced = s.state()
	s.file, s.log = nil, nil
	for len(b) > 0 {
		s.file = append(s.file, b[:pageSize])
		b = b[pageSize:]
	}
	return nil
}

func (d *fakeDriver) Snapshot(_ context.Context, _ string, addr abi.Address, w io.Writer) error {
	for _, p := range d.store(addr).state() {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func (d *fakeDriver) Walk(context.Context, string, string, storage.Options, func(storage.Found) error) error {
	return nil
}

type fakeDB struct {
	d           *fakeDriver
	s           *store
	pos         int // log entries captured
	failCapture error
	closed      bool
}

var _ storage.DB = (*fakeDB)(nil)

// commit appends a transaction leaving the database size pages long.
func (db *fakeDB) commit(size uint32, pages map[uint32][]byte) {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	db.s.log = append(db.s.log, txn{size, pages})
}

// randomTxn commits a transaction of random pages, the database growing
// now and then (every new page written, as SQLite does).
func (db *fakeDB) randomTxn(rng *rand.Rand) {
	db.d.mu.Lock()
	size := uint32(len(db.s.state()))
	db.d.mu.Unlock()
	next := size
	if size == 0 || rng.IntN(4) == 0 {
		next += uint32(1 + rng.IntN(3))
	}
	pages := map[uint32][]byte{}
	for p := size + 1; p <= next; p++ {
		pages[p] = randomPage(rng)
	}
	for range 1 + rng.IntN(3) {
		pages[uint32(1+rng.IntN(int(next)))] = randomPage(rng)
	}
	db.commit(next, pages)
}

func randomPage(rng *rand.Rand) []byte {
	p := make([]byte, pageSize)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

func (db *fakeDB) capture(all bool, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	if db.failCapture != nil {
		err := db.failCapture
		db.failCapture = nil
		return storage.CaptureInfo{}, err
	}
	db.d.mu.Lock()
	txns := slices.Clone(db.s.log[db.pos:])
	st := db.s.state()
	n := len(db.s.log)
	db.d.mu.Unlock()
	info := storage.CaptureInfo{PageSize: pageSize, Pages: uint32(len(st)), Transactions: len(txns)}
	var pgnos []uint32
	if all {
		for p := range uint32(len(st)) {
			pgnos = append(pgnos, p+1)
		}
	} else if len(txns) > 0 {
		seen := map[uint32]bool{}
		for _, t := range txns {
			for p := range t.pages {
				if p <= info.Pages && !seen[p] {
					seen[p] = true
					pgnos = append(pgnos, p)
				}
			}
		}
		slices.Sort(pgnos)
	}
	for _, p := range pgnos {
		if err := page(p, bytes.Clone(st[p-1])); err != nil {
			return storage.CaptureInfo{}, err
		}
		info.Changed++
	}
	db.pos = n
	return info, nil
}

func (db *fakeDB) Capture(_ context.Context, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	return db.capture(false, page)
}

func (db *fakeDB) CaptureAll(_ context.Context, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	return db.capture(true, page)
}

func (db *fakeDB) Checkpoint(context.Context) error {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	if db.pos == len(db.s.log) {
		db.s.file, db.s.log, db.pos = db.s.state(), nil, 0
	}
	return nil
}

func (db *fakeDB) Close() error {
	db.d.mu.Lock()
	defer db.d.mu.Unlock()
	if !db.closed {
		db.closed, db.s.open = true, false
	}
	return nil
}

func (db *fakeDB) Exec(context.Context, string, []abi.Value, storage.ExecOptions) (int64, error) {
	return 0, errors.New("fake: no SQL")
}
func (db *fakeDB) Query(context.Context, string, []abi.Value, *abi.RowsWriter) error {
	return errors.New("fake: no SQL")
}
func (db *fakeDB) HostExec(context.Context, string, ...abi.Value) (int64, error) {
	return 0, errors.New("fake: no SQL")
}
func (db *fakeDB) HostQuery(context.Context, string, []abi.Value, *abi.RowsWriter) error {
	return errors.New("fake: no SQL")
}
func (db *fakeDB) InTransaction() bool            { return false }
func (db *fakeDB) EndEvent(context.Context) error { return nil }

func storageOpts() storage.Options { return storage.Options{Replication: true} }
