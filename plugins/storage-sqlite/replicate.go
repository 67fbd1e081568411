package sqlitestorage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Capture reads SQLite's write-ahead log file directly, as Litestream and
// LiteFS do (https://www.sqlite.org/fileformat2.html#walformat): a 32-byte
// header (magic, format version, page size, checkpoint sequence, two salts,
// a checksum of the first 24 bytes), then frames of a 24-byte header (page
// number, the database's size in pages for a commit frame and 0 otherwise,
// the two salts, a checksum) and one page. Each frame's checksum continues
// the previous one's over its first 8 header bytes and its page, so a frame
// belongs to the log only if its salts are the header's and the checksum
// chain holds up to it; a stale frame left from before a restart, or a torn
// one, breaks it. SQLite itself recovers a log this way. Only frames up to
// a valid commit frame are committed: frames after the last one belong to an
// open, rolled-back or torn transaction and are never captured.

const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
	walMagicLE         = 0x377f0682 // checksums over little-endian words
	walMagicBE         = 0x377f0683 // over big-endian words
	walVersion         = 3007000
)

// capturePos is where the last capture ended in the log.
type capturePos struct {
	off          int64  // the end of its last commit frame; 0 for the start of the log, whatever its salts
	salt1, salt2 uint32 // the log's salts at off
	ck0, ck1     uint32 // the checksum chain at off
	pages        uint32 // the database's size in pages at off (0: not known)
}

// walHeader is a log's header, its checksum checked.
type walHeader struct {
	order        binary.ByteOrder // of the checksummed words
	pageSize     uint32
	salt1, salt2 uint32
	ck0, ck1     uint32
}

var errNoLog = errors.New("no log")

func readWALHeader(f *os.File) (walHeader, error) {
	var b [walHeaderSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			return walHeader{}, errNoLog // empty (truncated) or being started
		}
		return walHeader{}, err
	}
	var h walHeader
	switch binary.BigEndian.Uint32(b[0:]) {
	case walMagicLE:
		h.order = binary.LittleEndian
	case walMagicBE:
		h.order = binary.BigEndian
	default:
		return walHeader{}, fmt.Errorf("the log's header has no WAL magic number")
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != walVersion {
		return walHeader{}, fmt.Errorf("the log's format version is %d, not %d", v, walVersion)
	}
	h.pageSize = binary.BigEndian.Uint32(b[8:]) // as is: unlike the database header's, 65536 fits
	h.salt1, h.salt2 = binary.BigEndian.Uint32(b[16:]), binary.BigEndian.Uint32(b[20:])
	h.ck0, h.ck1 = walChecksum(h.order, 0, 0, b[:24])
	if h.ck0 != binary.BigEndian.Uint32(b[24:]) || h.ck1 != binary.BigEndian.Uint32(b[28:]) {
		return walHeader{}, errNoLog // a header being written: no frame of it is valid
	}
	return h, nil
}

// walChecksum continues SQLite's WAL checksum (s0, s1) over b, whose length
// is a multiple of 8.
func walChecksum(order binary.ByteOrder, s0, s1 uint32, b []byte) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}

// walScan is what a scan of the log found: the newest frame of every page
// its committed transactions wrote, how many of them are since the scan's
// start position, and where the last one ended.
type walScan struct {
	frames map[uint32]int64 // page number -> offset of its newest page data
	txns   int
	end    capturePos
}

// scanLog reads the committed transactions of the log after from, or from
// the start of the log when from.off is 0 or all is set. A log whose salts
// are no longer from's (it restarted) while from is past its start is an
// error: commits were checkpointed away before their capture.
func (d *db) scanLog(from capturePos, all bool) (walScan, error) {
	s := walScan{frames: map[uint32]int64{}, end: from}
	if err := d.openLog(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return s, nil
		}
		return s, err
	}
	h, err := readWALHeader(d.wal)
	if errors.Is(err, errNoLog) {
		if from.off != 0 {
			return s, fmt.Errorf("the log was emptied past commits never captured")
		}
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if int64(h.pageSize) != d.pageSize {
		return s, fmt.Errorf("the log's page size is %d, the database's %d", h.pageSize, d.pageSize)
	}
	pos := capturePos{off: walHeaderSize, salt1: h.salt1, salt2: h.salt2, ck0: h.ck0, ck1: h.ck1, pages: from.pages}
	counted := int64(0) // commits that end past it are since from
	if from.off != 0 {
		counted = from.off
		if from.salt1 != h.salt1 || from.salt2 != h.salt2 {
			return s, fmt.Errorf("the log restarted past commits never captured")
		}
		if !all {
			pos = from
		}
	}
	// The frames of the transaction being read, until its commit frame.
	type frame struct {
		pgno uint32
		off  int64 // of its page
	}
	var pending []frame
	frameSize := int64(walFrameHeaderSize) + int64(h.pageSize)
	buf := make([]byte, frameSize)
	ck0, ck1 := pos.ck0, pos.ck1
	for off := pos.off; ; off += frameSize {
		if _, err := d.wal.ReadAt(buf, off); err != nil {
			if errors.Is(err, io.EOF) {
				break // a partial frame at the end is a torn one
			}
			return s, err
		}
		if h.salt1 != binary.BigEndian.Uint32(buf[8:]) || h.salt2 != binary.BigEndian.Uint32(buf[12:]) {
			break // a frame from before the log restarted
		}
		ck0, ck1 = walChecksum(h.order, ck0, ck1, buf[:8])
		ck0, ck1 = walChecksum(h.order, ck0, ck1, buf[walFrameHeaderSize:])
		if ck0 != binary.BigEndian.Uint32(buf[16:]) || ck1 != binary.BigEndian.Uint32(buf[20:]) {
			break // torn, or stale: not on the chain
		}
		pgno := binary.BigEndian.Uint32(buf[0:])
		if pgno == 0 {
			return s, fmt.Errorf("the log holds a frame for page 0 at offset %d", off)
		}
		pending = append(pending, frame{pgno, off + walFrameHeaderSize})
		if commit := binary.BigEndian.Uint32(buf[4:]); commit != 0 {
			for _, p := range pending {
				s.frames[p.pgno] = p.off
			}
			pending = pending[:0]
			if off+frameSize > counted {
				s.txns++
			}
			pos = capturePos{off: off + frameSize, salt1: h.salt1, salt2: h.salt2, ck0: ck0, ck1: ck1, pages: commit}
		}
	}
	s.end = pos
	return s, nil
}

// Capture implements storage.Replicator.
func (d *db) Capture(ctx context.Context, page func(pgno uint32, data []byte) error) (storage.CaptureInfo, error) {
	return d.captureLog(ctx, false, page)
}

// CaptureAll implements storage.Replicator.
func (d *db) CaptureAll(ctx context.Context, page func(pgno uint32, data []byte) error) (storage.CaptureInfo, error) {
	return d.captureLog(ctx, true, page)
}

func (d *db) captureLog(ctx context.Context, all bool, page func(uint32, []byte) error) (storage.CaptureInfo, error) {
	if d.closed {
		return storage.CaptureInfo{}, errClosed
	}
	if !d.opts.Replication {
		return storage.CaptureInfo{}, errors.New("capture: the database was not opened for replication (storage.Options.Replication)")
	}
	s, err := d.scanLog(d.capture, all)
	if err != nil {
		return storage.CaptureInfo{}, fmt.Errorf("capture %s: %w", d.path, err)
	}
	info := storage.CaptureInfo{PageSize: uint32(d.pageSize), Pages: s.end.pages, Transactions: s.txns}
	if info.Pages == 0 {
		// No commit in the log since the database was opened: its size is
		// the database file's.
		n, err := d.filePages()
		if err != nil {
			return storage.CaptureInfo{}, fmt.Errorf("capture %s: %w", d.path, err)
		}
		info.Pages = n
	}
	buf := make([]byte, d.pageSize)
	read := func(pgno uint32) error {
		if off, ok := s.frames[pgno]; ok {
			_, err := d.wal.ReadAt(buf, off)
			return err
		}
		if err := d.openFile(); err != nil {
			return err
		}
		if _, err := d.file.ReadAt(buf, int64(pgno-1)*d.pageSize); err != nil {
			return fmt.Errorf("page %d is in neither the log nor the database file: %w", pgno, err)
		}
		return nil
	}
	var pgnos []uint32
	if all {
		lock := uint32(1<<30/d.pageSize + 1) // SQLite's lock page, never stored
		for p := uint32(1); p <= info.Pages; p++ {
			if p != lock {
				pgnos = append(pgnos, p)
			}
		}
	} else {
		for p := range s.frames {
			if p <= info.Pages {
				pgnos = append(pgnos, p)
			}
		}
		slices.Sort(pgnos)
	}
	for _, p := range pgnos {
		if err := ctx.Err(); err != nil {
			return storage.CaptureInfo{}, err
		}
		if err := read(p); err != nil {
			return storage.CaptureInfo{}, fmt.Errorf("capture %s: %w", d.path, err)
		}
		if err := page(p, buf); err != nil {
			return storage.CaptureInfo{}, err
		}
		info.Changed++
	}
	d.capture = s.end
	d.capture.pages = info.Pages
	return info, nil
}

// filePages is the database file's size in pages.
func (d *db) filePages() (uint32, error) {
	fi, err := os.Stat(d.path)
	if err != nil {
		return 0, err
	}
	return uint32(fi.Size() / d.pageSize), nil
}

// openFile opens the database file for reading (d.file), kept until Close.
func (d *db) openFile() error {
	if d.file != nil {
		return nil
	}
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	d.file = f
	return nil
}

// Checkpoint implements storage.Replicator.
func (d *db) Checkpoint(ctx context.Context) error {
	if d.closed {
		return errClosed
	}
	if d.c.inTx() {
		return nil
	}
	if d.opts.Replication {
		s, err := d.scanLog(d.capture, false)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", d.path, err)
		}
		if s.txns != 0 {
			return nil // commits not yet captured stay in the log
		}
	}
	d.hostStmt = true
	busy, err := d.pragma("PRAGMA wal_checkpoint(TRUNCATE)")
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", d.path, err)
	}
	d.c.pagesWritten() // the checkpoint's writes are no event's
	if busy.Int != 0 {
		return fmt.Errorf("checkpoint %s: the log could not be checkpointed", d.path)
	}
	// The log is empty; the next commit starts it again with new salts.
	d.capture = capturePos{pages: d.capture.pages}
	return nil
}
