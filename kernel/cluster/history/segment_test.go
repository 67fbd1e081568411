package history

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/superfly/ltx"
	_ "modernc.org/sqlite"
)

// pagesOf splits a database file into pages.
func pagesOf(b []byte, pageSize int) [][]byte {
	var out [][]byte
	for off := 0; off < len(b); off += pageSize {
		out = append(out, b[off:off+pageSize])
	}
	return out
}

// capture is what a replicator does after a commit, from whole files: the
// pages that differ from the last capture, one LTX file for the next txid.
type capture struct {
	pageSize int
	last     [][]byte
	ck       Checksums
	txid     uint64
}

func (c *capture) next(t *testing.T, db []byte) []byte {
	t.Helper()
	now := pagesOf(db, c.pageSize)
	var changed []Page
	for i, p := range now {
		if i >= len(c.last) || !bytes.Equal(p, c.last[i]) {
			changed = append(changed, Page{Pgno: uint32(i + 1), Data: bytes.Clone(p)})
		}
	}
	pre := c.ck.Sum()
	post, err := c.ck.Apply(uint32(c.pageSize), uint32(len(now)), changed)
	if err != nil {
		t.Fatal(err)
	}
	c.txid++
	c.last = now
	var buf bytes.Buffer
	if err := Encode(&buf, &File{PageSize: uint32(c.pageSize), Commit: uint32(len(now)), MinTXID: c.txid, MaxTXID: c.txid, Timestamp: int64(c.txid), PreApply: pre, PostApply: post, Pages: changed}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// snapshot encodes the whole database at the last captured txid.
func (c *capture) snapshot(t *testing.T) []byte {
	var pages []Page
	for i, p := range c.last {
		pages = append(pages, Page{Pgno: uint32(i + 1), Data: p})
	}
	var buf bytes.Buffer
	if err := Encode(&buf, &File{PageSize: uint32(c.pageSize), Commit: uint32(len(c.last)), MinTXID: 1, MaxTXID: c.txid, PostApply: c.ck.Sum(), Pages: pages}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tempImage starts an image in a file of the test's, closed at its end.
func tempImage(t *testing.T) (*os.File, *Image) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "image.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	im, err := NewImage(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, im
}

func restoreImage(t *testing.T, files ...[]byte) []byte {
	t.Helper()
	f, im := tempImage(t)
	for i, b := range files {
		lf, err := Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if err := im.Apply(lf); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A real SQLite database, captured transaction by transaction, restores
// byte for byte from the empty database and from a snapshot, and ltx's own
// decoder verifies every file, decodes every snapshot to the database and
// agrees with every checksum.
func TestSegmentsOfARealDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(DELETE)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	c := &capture{pageSize: 4096}
	var files [][]byte
	states := map[uint64][]byte{}
	snaps := map[uint64][]byte{}
	rnd := rand.New(rand.NewPCG(1, 2))
	steps := []string{"CREATE TABLE kv (k INTEGER PRIMARY KEY, v BLOB)"}
	for i := range 40 {
		switch i % 5 {
		case 4:
			steps = append(steps, fmt.Sprintf("DELETE FROM kv WHERE k %% 3 = %d", i%3))
		case 3:
			steps = append(steps, fmt.Sprintf("UPDATE kv SET v = randomblob(%d) WHERE k %% 2 = 0", 100+rnd.IntN(900)))
		default:
			steps = append(steps, fmt.Sprintf("INSERT INTO kv (v) SELECT randomblob(%d) FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5)", 200+rnd.IntN(3000)))
		}
	}
	steps = append(steps, "DELETE FROM kv WHERE k > 100", "VACUUM") // the file shrinks
	for i, stmt := range steps {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, c.next(t, raw))
		states[c.txid] = raw
		if i%10 == 9 {
			snaps[c.txid] = c.snapshot(t)
		}
	}
	if len(snaps) < 3 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	last := states[c.txid]
	if len(last) >= len(states[c.txid-2]) {
		t.Fatalf("the database did not shrink (%d bytes, %d before)", len(last), len(states[c.txid-2]))
	}

	// ltx's own decoder: every file verifies; every checksum is the one
	// ltx computes from the database's bytes; snapshots decode to it.
	for i, b := range files {
		dec := ltx.NewDecoder(bytes.NewReader(b))
		if err := dec.Verify(); err != nil {
			t.Fatalf("ltx verifies file %d: %v", i+1, err)
		}
		want, err := ltx.ChecksumReader(bytes.NewReader(states[uint64(i+1)]), 4096)
		if err != nil {
			t.Fatal(err)
		}
		if got := dec.Trailer().PostApplyChecksum; got != want {
			t.Fatalf("file %d: post-apply checksum %s, ltx computes %s", i+1, got, want)
		}
	}
	for txid, b := range snaps {
		var out bytes.Buffer
		if err := ltx.NewDecoder(bytes.NewReader(b)).DecodeDatabaseTo(&out); err != nil {
			t.Fatalf("ltx decodes snapshot %d: %v", txid, err)
		}
		if !bytes.Equal(out.Bytes(), states[txid]) {
			t.Fatalf("ltx decodes snapshot %d to other bytes", txid)
		}
	}

	// Ours: the whole chain, and from each snapshot.
	if got := restoreImage(t, files...); !bytes.Equal(got, last) {
		t.Fatalf("restored %d bytes, not the database's %d", len(got), len(last))
	}
	for txid, b := range snaps {
		got := restoreImage(t, append([][]byte{b}, files[txid:]...)...)
		if !bytes.Equal(got, last) {
			t.Fatalf("restored from snapshot %d: other bytes", txid)
		}
	}

	// The image is a database SQLite reads, with the same rows.
	img := filepath.Join(dir, "image.db")
	if err := os.WriteFile(img, restoreImage(t, files...), 0o600); err != nil {
		t.Fatal(err)
	}
	rdb, err := sql.Open("sqlite", "file:"+img+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	var check string
	var n, m int
	if err := rdb.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
	if err := rdb.QueryRow("SELECT count(*) FROM kv").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM kv").Scan(&m); err != nil || n != m || n == 0 {
		t.Fatalf("rows: image %d, database %d, %v", n, m, err)
	}
}

// Files ltx's own encoder writes (here from a model database of random
// pages that grows, shrinks and grows again) decode with ours and apply to
// the same bytes.
func TestFilesLTXWrites(t *testing.T) {
	const pageSize = 512
	rnd := rand.New(rand.NewPCG(3, 4))
	var model []byte
	var files [][]byte
	var pre ltx.Checksum
	for txid, size := range []int{6, 9, 9, 4, 7, 1, 3} {
		grown := len(model) / pageSize
		next := make([]byte, size*pageSize)
		copy(next, model)
		model = next
		var pgnos []uint32
		for pg := 1; pg <= size; pg++ {
			if txid == 0 || pg > grown || rnd.IntN(3) == 0 {
				pgnos = append(pgnos, uint32(pg))
				for i := range pageSize {
					model[(pg-1)*pageSize+i] = byte(rnd.IntN(4)) // compressible, not constant
				}
			}
		}
		var buf bytes.Buffer
		enc, err := ltx.NewEncoder(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.EncodeHeader(ltx.Header{Version: ltx.Version, PageSize: pageSize, Commit: uint32(size), MinTXID: ltx.TXID(txid + 1), MaxTXID: ltx.TXID(txid + 1), Timestamp: 1, PreApplyChecksum: pre}); err != nil {
			t.Fatal(err)
		}
		for _, pg := range pgnos {
			if err := enc.EncodePage(ltx.PageHeader{Pgno: pg}, model[(pg-1)*pageSize:pg*pageSize]); err != nil {
				t.Fatal(err)
			}
		}
		post, err := ltx.ChecksumReader(bytes.NewReader(model), pageSize)
		if err != nil {
			t.Fatal(err)
		}
		enc.SetPostApplyChecksum(post)
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		pre = post
		files = append(files, buf.Bytes())
		if got := restoreImage(t, files...); !bytes.Equal(got, model) {
			t.Fatalf("after transaction %d: %d bytes restored, other than ltx's %d", txid+1, len(got), len(model))
		}
	}
}

func encoded(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func page(pgno uint32, fill byte) Page {
	return Page{Pgno: pgno, Data: bytes.Repeat([]byte{fill}, 512)}
}

// A chain of three small transactions on 512-byte pages, and checksums.
func smallChain(t *testing.T) []*File {
	var ck Checksums
	var out []*File
	for i, pages := range [][]Page{{page(1, 1), page(2, 2)}, {page(2, 3), page(3, 4)}, {page(1, 5)}} {
		commit := uint32(2 + min(i, 1))
		pre := ck.Sum()
		post, err := ck.Apply(512, commit, pages)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &File{PageSize: 512, Commit: commit, MinTXID: uint64(i + 1), MaxTXID: uint64(i + 1), PreApply: pre, PostApply: post, Pages: pages})
	}
	return out
}

func TestDecodeRefusesDamage(t *testing.T) {
	files := smallChain(t)
	good := encoded(t, files[1])
	if _, err := Decode(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	// Every single flipped byte past the magic is refused (a damaged
	// segment is never applied, whatever the byte).
	for i := 4; i < len(good); i++ {
		bad := bytes.Clone(good)
		bad[i] ^= 0x40
		if f, err := Decode(bytes.NewReader(bad)); err == nil {
			if f.Sums() == files[1].Sums() && len(f.Pages) == 2 && bytes.Equal(f.Pages[0].Data, files[1].Pages[0].Data) && bytes.Equal(f.Pages[1].Data, files[1].Pages[1].Data) {
				continue // a byte no reader looks at would be harmless
			}
			t.Fatalf("byte %d flipped: decoded %+v", i, f.Sums())
		}
	}
	for _, n := range []int{0, 50, ltx.HeaderSize, len(good) - 1} {
		if _, err := Decode(bytes.NewReader(good[:n])); err == nil {
			t.Fatalf("a file cut at %d of %d bytes was decoded", n, len(good))
		}
	}
	if _, err := Decode(bytes.NewReader(append(bytes.Clone(good), 0))); err == nil {
		t.Fatal("a byte after the trailer was accepted")
	}
}

func TestImageRefusesWhatDoesNotFollow(t *testing.T) {
	files := smallChain(t)
	apply := func(fs ...*File) error {
		_, im := tempImage(t)
		for _, lf := range fs {
			if err := im.Apply(lf); err != nil {
				return err
			}
		}
		return nil
	}
	if err := apply(files...); err != nil {
		t.Fatal(err)
	}
	lie := *files[2]
	lie.PostApply ^= 1
	wrongPre := *files[2]
	wrongPre.MinTXID, wrongPre.MaxTXID = 2, 2
	for _, c := range []struct {
		name string
		fs   []*File
		what string
	}{
		{"a missing transaction", []*File{files[0], files[2]}, "applied after transaction 1"},
		{"a transaction again", []*File{files[0], files[1], files[1]}, "applied after transaction 2"},
		{"a pre-apply checksum off the chain", []*File{files[0], &wrongPre}, "expects checksum"},
		{"a post-apply checksum its pages do not give", []*File{files[0], files[1], &lie}, "leaves checksum"},
		{"a first file twice", []*File{files[0], files[0]}, "from transaction 1 applied after"},
		{"a segment on nothing", []*File{files[1]}, "applied after transaction 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := apply(c.fs...)
			if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), c.what) {
				t.Fatalf("error %v, want a broken chain saying %q", err, c.what)
			}
		})
	}
}

func TestChecksumsRefuseGaps(t *testing.T) {
	var ck Checksums
	if _, err := ck.Apply(512, 3, []Page{page(1, 1), page(3, 3)}); err == nil {
		t.Fatal("a database grew to 3 pages without page 2")
	}
	if ck.Sum() != 0 || ck.Pages() != 0 {
		t.Fatal("a refused transaction changed the checksums")
	}
	if _, err := ck.Apply(512, 2, []Page{page(2, 2), page(1, 1)}); err == nil {
		t.Fatal("pages out of order were accepted")
	}
	if _, err := ck.Apply(512, 2, []Page{page(1, 1), page(2, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.Apply(1024, 2, nil); err == nil {
		t.Fatal("another page size was accepted")
	}
	// Shrinking to nothing leaves LTX's checksum of the empty database.
	if sum, err := ck.Apply(512, 0, nil); err != nil || sum != ltx.ChecksumFlag {
		t.Fatalf("empty database: %s, %v", sum, err)
	}
}

// Rebuild: a listing planned and its objects read, decoded, checked against
// their keys and applied, from the empty database or from a snapshot.
func TestRebuild(t *testing.T) {
	files := smallChain(t)
	snapPages := []Page{page(1, 1), page(2, 3), page(3, 4)}
	snapFile := &File{PageSize: 512, Commit: 3, MinTXID: 1, MaxTXID: 2, PostApply: files[1].PostApply, Pages: snapPages}
	want := append(append(bytes.Repeat([]byte{5}, 512), bytes.Repeat([]byte{3}, 512)...), bytes.Repeat([]byte{4}, 512)...)
	objects := map[Key][]byte{
		seg(1, 1, 0): encoded(t, files[0]),
		seg(2, 1, 1): encoded(t, files[1]),
		seg(3, 2, 1): encoded(t, files[2]),
	}
	errRead := errors.New("read failed")
	rebuild := func(objects map[Key][]byte) ([]byte, error) {
		var keys []Key
		for k := range objects {
			keys = append(keys, k)
		}
		p, err := PlanRestore(listingOf(t, keys...))
		if err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(t.TempDir(), "image.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		err = Rebuild(p, func(o Object) (io.ReadCloser, error) {
			b, ok := objects[o.Key]
			if b == nil && ok {
				return nil, errRead
			}
			return io.NopCloser(bytes.NewReader(b)), nil
		}, f)
		if err != nil {
			return nil, err
		}
		return os.ReadFile(f.Name())
	}
	if got, err := rebuild(objects); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("from the empty database: %v", err)
	}
	objects[snap(2, 1)] = encoded(t, snapFile)
	if got, err := rebuild(objects); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("from the snapshot: %v", err)
	}
	delete(objects, snap(2, 1))

	for _, c := range []struct {
		name string
		key  Key
		body []byte
		what string
	}{
		{"another transaction's file", seg(3, 2, 1), encoded(t, files[1]), "holds transactions 2 to 2"},
		{"a damaged file", seg(2, 1, 1), append(bytes.Clone(objects[seg(2, 1, 1)][:200]), 0), "the segment txid 2 generation 1"},
		{"a file off the chain", seg(2, 1, 1), encoded(t, &File{PageSize: 512, Commit: 2, MinTXID: 2, MaxTXID: 2, PreApply: files[1].PreApply ^ 1, PostApply: files[1].PostApply, Pages: files[1].Pages[:1]}), "expects checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := map[Key][]byte{}
			for k, v := range objects {
				bad[k] = v
			}
			bad[c.key] = c.body
			_, err := rebuild(bad)
			var be *BrokenError
			if !errors.As(err, &be) || be.At != c.key.Pos() || !strings.Contains(err.Error(), c.what) {
				t.Fatalf("error %v, want a broken chain at %v saying %q", err, c.key.Pos(), c.what)
			}
		})
	}
	objects[seg(2, 1, 1)] = nil
	if _, err := rebuild(objects); !errors.Is(err, errRead) || errors.Is(err, ErrBroken) {
		t.Fatalf("a failed read: %v, want it as it is", err)
	}
}

// An image that cannot be written (the local disk failing: here a file
// open for appending, where WriteAt fails) is an error of its own, never a
// broken history: the bucket's objects are sound and a later restore may
// succeed.
func TestRebuildLocalWriteFailureIsNotBroken(t *testing.T) {
	files := smallChain(t)
	objects := map[Key][]byte{seg(1, 1, 0): encoded(t, files[0]), seg(2, 1, 1): encoded(t, files[1])}
	p, err := PlanRestore(listingOf(t, seg(1, 1, 0), seg(2, 1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "image.db"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = RebuildImage(p, func(o Object) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(objects[o.Key])), nil
	}, f)
	if err == nil || errors.Is(err, ErrBroken) {
		t.Fatalf("an image that cannot be written: %v, want an error that is not ErrBroken", err)
	}
}
