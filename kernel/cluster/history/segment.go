package history

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/superfly/ltx"
)

// Page is one database page.
type Page struct {
	Pgno uint32
	Data []byte
}

// File is one LTX v3 file (book ADR 0005) in memory: a segment holds one
// transaction (MinTXID = MaxTXID = its txid) and the pages it changed; a
// snapshot holds transactions 1 to its txid and every page of the database.
// A file starting at transaction 1 is a snapshot in LTX's terms: every
// page, and no pre-apply checksum. Checksums are LTX's rolling database
// checksums (ltx.ChecksumFlag set), kept by Checksums.
type File struct {
	PageSize         uint32
	Commit           uint32 // the database's size after the file, in pages
	MinTXID, MaxTXID uint64
	Timestamp        int64 // milliseconds since 1970, as the caller's clock says
	PreApply         ltx.Checksum
	PostApply        ltx.Checksum
	Pages            []Page // ascending page numbers
}

// Sums is what the file says of its place in a chain (CheckChain).
func (f *File) Sums() Sums {
	return Sums{MinTXID: f.MinTXID, MaxTXID: f.MaxTXID, PreApply: f.PreApply, PostApply: f.PostApply}
}

// Encode writes f as an LTX v3 file with ltx's own encoder: LZ4-compressed
// pages, the page index and the trailer's file checksum. ltx refuses what
// the format forbids (pages out of order or past Commit, the lock page, a
// snapshot with a gap, a pre-apply checksum on a snapshot or none on a
// segment, an empty database without the empty checksum).
func Encode(w io.Writer, f *File) error {
	enc, err := ltx.NewEncoder(w)
	if err != nil {
		return err
	}
	if err := enc.EncodeHeader(ltx.Header{
		Version:          ltx.Version,
		PageSize:         f.PageSize,
		Commit:           f.Commit,
		MinTXID:          ltx.TXID(f.MinTXID),
		MaxTXID:          ltx.TXID(f.MaxTXID),
		Timestamp:        f.Timestamp,
		PreApplyChecksum: f.PreApply,
	}); err != nil {
		return fmt.Errorf("history: ltx header: %w", err)
	}
	for _, p := range f.Pages {
		if err := enc.EncodePage(ltx.PageHeader{Pgno: p.Pgno}, p.Data); err != nil {
			_ = enc.Cleanup()
			return fmt.Errorf("history: ltx page %d: %w", p.Pgno, err)
		}
	}
	enc.SetPostApplyChecksum(f.PostApply)
	if err := enc.Close(); err != nil {
		return fmt.Errorf("history: ltx file: %w", err)
	}
	return nil
}

// Decode reads and verifies one LTX file with ltx's own decoder: the
// header, every page (LZ4 block pages; LZ4 frame pages of older writers are
// read too, as ltx reads them), the page index against the pages, nothing
// after the trailer, the file checksum, and for a snapshot its post-apply
// checksum against its pages. It also refuses pages out of order, past
// Commit or on the lock page, and a snapshot missing a page. Nothing is
// returned before all of it held, so a caller never applies part of a file.
func Decode(r io.Reader) (*File, error) {
	dec := ltx.NewDecoder(r)
	dec.SetRetainPageIndex(false)
	if err := dec.DecodeHeader(); err != nil {
		return nil, fmt.Errorf("history: ltx header: %w", err)
	}
	h := dec.Header()
	f := &File{
		PageSize: h.PageSize, Commit: h.Commit,
		MinTXID: uint64(h.MinTXID), MaxTXID: uint64(h.MaxTXID),
		Timestamp: h.Timestamp, PreApply: h.PreApplyChecksum,
	}
	if h.NoChecksum() {
		return nil, errors.New("history: ltx file without checksums")
	}
	lock := ltx.LockPgno(h.PageSize)
	for {
		var ph ltx.PageHeader
		data := make([]byte, h.PageSize)
		err := dec.DecodePage(&ph, data)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("history: ltx page %d: %w", len(f.Pages)+1, err)
		}
		switch {
		case ph.Pgno > h.Commit:
			return nil, fmt.Errorf("history: ltx page %d past the database's %d pages", ph.Pgno, h.Commit)
		case ph.Pgno == lock:
			return nil, fmt.Errorf("history: ltx file holds the lock page %d", ph.Pgno)
		case len(f.Pages) > 0 && ph.Pgno <= f.Pages[len(f.Pages)-1].Pgno:
			return nil, fmt.Errorf("history: ltx page %d after page %d", ph.Pgno, f.Pages[len(f.Pages)-1].Pgno)
		}
		f.Pages = append(f.Pages, Page{Pgno: ph.Pgno, Data: data})
	}
	if err := dec.Close(); err != nil {
		return nil, fmt.Errorf("history: ltx file: %w", err)
	}
	f.PostApply = dec.Trailer().PostApplyChecksum
	if h.IsSnapshot() {
		want := h.Commit
		if lock <= h.Commit {
			want--
		}
		if uint32(len(f.Pages)) != want {
			return nil, fmt.Errorf("history: ltx snapshot holds %d pages of %d", len(f.Pages), want)
		}
	}
	return f, nil
}

// Checksums are a database's page checksums, kept in memory so that each
// transaction's post-apply checksum follows from its pages alone (ADR
// 0007's capture): LTX's checksum of a database is ChecksumFlag with the
// XOR of every page's checksum (page number and contents), the lock page
// left out.
type Checksums struct {
	pageSize uint32
	pages    []ltx.Checksum // by page number - 1
	sum      ltx.Checksum
}

// Sum is the database's checksum: 0 before any transaction (the empty
// database, as a first LTX file's pre-apply checksum says it), else
// ChecksumFlag with the XOR of the pages'.
func (c *Checksums) Sum() ltx.Checksum { return c.sum }

// Pages is the database's size in pages.
func (c *Checksums) Pages() uint32 { return uint32(len(c.pages)) }

// Clone is a copy of c that moves on its own.
func (c *Checksums) Clone() *Checksums {
	return &Checksums{pageSize: c.pageSize, pages: append([]ltx.Checksum(nil), c.pages...), sum: c.sum}
}

// Apply moves the checksums past a transaction that leaves the database
// commit pages long and writes pages (ascending, none on the lock page),
// and returns the new Sum. A page the database gains must be written: a
// gap is an error, and nothing is changed.
func (c *Checksums) Apply(pageSize, commit uint32, pages []Page) (ltx.Checksum, error) {
	if c.pageSize != 0 && pageSize != c.pageSize {
		return c.sum, fmt.Errorf("history: page size %d, the database's is %d", pageSize, c.pageSize)
	}
	lock := ltx.LockPgno(pageSize)
	old := uint32(len(c.pages))
	gained := uint32(0) // pages written past the old end
	for i, p := range pages {
		switch {
		case p.Pgno == 0 || p.Pgno > commit:
			return c.sum, fmt.Errorf("history: page %d outside the database's %d pages", p.Pgno, commit)
		case p.Pgno == lock:
			return c.sum, fmt.Errorf("history: page %d is the lock page", p.Pgno)
		case uint32(len(p.Data)) != pageSize:
			return c.sum, fmt.Errorf("history: page %d holds %d bytes, not %d", p.Pgno, len(p.Data), pageSize)
		case i > 0 && p.Pgno <= pages[i-1].Pgno:
			return c.sum, fmt.Errorf("history: page %d after page %d", p.Pgno, pages[i-1].Pgno)
		case p.Pgno > old:
			gained++
		}
	}
	if commit > old {
		want := commit - old
		if old < lock && lock <= commit {
			want--
		}
		if gained != want {
			return c.sum, fmt.Errorf("history: the database grows from %d to %d pages with %d of its %d new pages written", old, commit, gained, want)
		}
	}
	c.pageSize = pageSize
	if commit < old {
		c.pages = c.pages[:commit]
	}
	for len(c.pages) < int(commit) {
		c.pages = append(c.pages, 0)
	}
	for _, p := range pages {
		c.pages[p.Pgno-1] = ltx.ChecksumPage(p.Pgno, p.Data)
	}
	sum := ltx.ChecksumFlag
	for _, s := range c.pages {
		sum ^= s
	}
	c.sum = ltx.ChecksumFlag | sum
	return c.sum, nil
}

// Image is a database being rebuilt from its history (restore step 3):
// a file of pages, a snapshot or a first segment applied to it first, then
// each next transaction, its pre-apply checksum checked against the
// database's before and its post-apply checksum against the result.
type Image struct {
	f    *os.File
	ck   Checksums
	txid uint64
}

// NewImage starts an empty image in f, which it truncates.
func NewImage(f *os.File) (*Image, error) {
	if err := f.Truncate(0); err != nil {
		return nil, err
	}
	return &Image{f: f}, nil
}

// TXID is the last transaction applied, 0 for none.
func (im *Image) TXID() uint64 { return im.txid }

// Checksum is the image's database checksum.
func (im *Image) Checksum() ltx.Checksum { return im.ck.Sum() }

// Checksums is a copy of the image's page checksums, from which a writer
// continues the chain the image ends.
func (im *Image) Checksums() *Checksums { return im.ck.Clone() }

// Apply applies the next file of a chain. A file that does not follow (a
// transaction out of order, a pre-apply checksum that is not the image's,
// pages whose result is not the file's post-apply checksum) is an error
// wrapping ErrBroken; the image is then not to be used.
func (im *Image) Apply(f *File) error {
	switch {
	case f.MinTXID == 1 && im.txid != 0:
		return fmt.Errorf("%w: a file from transaction 1 applied after transaction %d", ErrBroken, im.txid)
	case f.MinTXID != 1 && f.MinTXID != im.txid+1:
		return fmt.Errorf("%w: transactions %d to %d applied after transaction %d", ErrBroken, f.MinTXID, f.MaxTXID, im.txid)
	case f.PreApply != im.ck.Sum():
		return fmt.Errorf("%w: transaction %d expects checksum %s before it, the database's is %s", ErrBroken, f.MinTXID, f.PreApply, im.ck.Sum())
	}
	post, err := im.ck.Apply(f.PageSize, f.Commit, f.Pages)
	if err != nil {
		return fmt.Errorf("%w: transaction %d: %v", ErrBroken, f.MaxTXID, err)
	}
	if post != f.PostApply {
		return fmt.Errorf("%w: transaction %d leaves checksum %s, its file says %s", ErrBroken, f.MaxTXID, post, f.PostApply)
	}
	for _, p := range f.Pages {
		if _, err := im.f.WriteAt(p.Data, int64(p.Pgno-1)*int64(f.PageSize)); err != nil {
			return err
		}
	}
	if err := im.f.Truncate(int64(f.Commit) * int64(f.PageSize)); err != nil {
		return err
	}
	im.txid = f.MaxTXID
	return nil
}

// Rebuild is restore steps 3 and 4 of book ADR 0007 for a plan: each object is
// read (open), decoded and verified whole, checked to be the file its key
// names (its transactions), and applied to an image in f, in the plan's
// order. Any object that is not what the chain needs is a *BrokenError at
// its position; the error of open, and one writing f (the local disk), is
// returned as it is, never wrapping ErrBroken (a restore to retry, not a
// broken history). f then holds the database at the plan's head.
func Rebuild(p Plan, open func(Object) (io.ReadCloser, error), f *os.File) error {
	_, err := RebuildImage(p, open, f)
	return err
}

// RebuildImage is Rebuild returning the image, whose checksums a writer
// continuing from the plan's head needs.
func RebuildImage(p Plan, open func(Object) (io.ReadCloser, error), f *os.File) (*Image, error) {
	im, err := NewImage(f)
	if err != nil {
		return nil, err
	}
	for _, o := range p.Objects() {
		rc, err := open(o)
		if err != nil {
			return nil, err
		}
		lf, err := Decode(rc)
		rc.Close()
		if err != nil {
			return nil, &BrokenError{Head: p.Head, At: o.Key.Pos(), What: fmt.Sprintf("the %s: %v", o.Key, err)}
		}
		if err := checkRange(p.Head, o.Key, lf.Sums()); err != nil {
			return nil, err
		}
		if err := im.Apply(lf); errors.Is(err, ErrBroken) {
			return nil, &BrokenError{Head: p.Head, At: o.Key.Pos(), What: fmt.Sprintf("the %s: %v", o.Key, err)}
		} else if err != nil {
			// Writing the image failed (the local disk): a restore to
			// retry, not a broken history.
			return nil, fmt.Errorf("history: writing the %s to %s: %w", o.Key, f.Name(), err)
		}
	}
	return im, nil
}
