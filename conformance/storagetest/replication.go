package storagetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The replication rules (storage.Replicator): every capture is applied, as
// the kernel would ship it, to a replica rebuilt by kernel/cluster/history
// (its checksums and Image: a capture the history could not apply fails),
// and the replica is compared page for page with the database as Snapshot
// writes it.
var replicationTests = []test{
	{"HoldsCommittedPages", func(t *testing.T, s suite) {
		x, r := s.replicated(t)
		x.endEvent()
		r.capture(x.db, true)
		x.checkpointClose()
		r.wantSame(x.snapshot())
		for round := 0; round < 3; round++ {
			x.reopen()
			x.fill(100, 300)
			x.endEvent()
			if info := r.capture(x.db, false); info.Transactions != 100 {
				t.Errorf("round %d: a capture of 100 commits says %d transactions", round, info.Transactions)
			}
			x.exec("UPDATE t SET v = randomblob(300) WHERE k = (SELECT max(k) - 50 FROM t)")
			x.endEvent()
			if info := r.capture(x.db, false); info.Transactions != 1 || info.Changed > 4 || info.Changed == 0 {
				t.Errorf("round %d: a capture of a one-row update in a %d-page database: %d transactions, %d pages (want 1, and 1 to 4 pages)", round, info.Pages, info.Transactions, info.Changed)
			}
			x.exec("DELETE FROM t WHERE k % 3 = ?", I(int64(round)))
			x.endEvent()
			r.capture(x.db, false)
			r.wantEmpty(x.db, "with no commit since the last")
			x.checkpointClose()
			r.wantSame(x.snapshot())
		}
	}},
	{"CaptureAllOfAnExistingDatabase", func(t *testing.T, s suite) {
		// A database written before it was opened for replication: its
		// pages are in the database file, not the log.
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
		x.fill(100, 300)
		x.endEvent()
		x.opts.Replication = true
		x.reopen()
		x.exec("UPDATE t SET v = randomblob(300) WHERE k = 7")
		x.endEvent()
		r := newReplica(t)
		if info := r.capture(x.db, true); info.Transactions != 1 || info.Changed < 10 {
			t.Errorf("CaptureAll: %d transactions and %d pages, want 1 and every page", info.Transactions, info.Changed)
		}
		x.exec("DELETE FROM t WHERE k > 90")
		x.endEvent()
		r.finish(x)
	}},
	{"NeverRolledBack", func(t *testing.T, s suite) {
		x, r := s.replicated(t)
		x.fill(50, 1000)
		x.endEvent()
		r.capture(x.db, true)
		// A small page cache makes SQLite spill the transaction's pages,
		// existing ones and new ones, into the log before it ends.
		x.hostExec("PRAGMA cache_size=5")
		x.exec("BEGIN")
		x.exec("UPDATE t SET v = randomblob(1000)")
		x.fill(300, 1000)
		r.wantEmpty(x.db, "inside an open transaction")
		x.exec("ROLLBACK")
		x.endEvent()
		r.wantEmpty(x.db, "after a rollback")
		x.exec("BEGIN")
		x.fill(40, 1000)
		x.exec("ROLLBACK")
		x.exec("INSERT INTO t(v) VALUES(randomblob(100))")
		x.endEvent()
		r.finish(x)
	}},
	{"NothingLostAcrossCheckpoint", func(t *testing.T, s suite) {
		x, r := s.replicated(t)
		x.endEvent()
		r.capture(x.db, true)
		checkpoint := func() {
			t.Helper()
			if err := x.db.Checkpoint(context.Background()); err != nil {
				t.Fatalf("Checkpoint: %v", err)
			}
		}
		for i := 0; i < 3; i++ {
			// capture, checkpoint, write, capture
			x.exec("INSERT INTO t(v) VALUES(randomblob(2000))")
			x.endEvent()
			r.capture(x.db, false)
			checkpoint()
			x.exec("INSERT INTO t(v) VALUES(randomblob(2000))")
			x.endEvent()
			// A checkpoint before the capture must keep the commit.
			checkpoint()
			if info := r.capture(x.db, false); info.Transactions != 1 {
				t.Errorf("a commit checkpointed before its capture: the capture holds %d transactions, want 1", info.Transactions)
			}
			checkpoint()
		}
		// A close keeps the log of a replicated database: its commits are
		// captured after the next open.
		x.exec("UPDATE t SET v = randomblob(10) WHERE k = 2")
		x.endEvent()
		x.reopen()
		if info := r.capture(x.db, false); info.Transactions == 0 {
			t.Error("a commit made before a close is not captured after the next open")
		}
		r.finish(x)
	}},
	{"NotWithoutReplication", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.endEvent()
		if _, err := x.db.Capture(context.Background(), func(uint32, []byte) error { return nil }); err == nil {
			t.Error("Capture of a database not opened for replication succeeded")
		}
		if err := x.db.Checkpoint(context.Background()); err != nil {
			t.Errorf("Checkpoint of a database not opened for replication: %v", err)
		}
	}},
}

// replicated opens a fresh database for replication, with a table t(k, v),
// and its replica.
func (s suite) replicated(t *testing.T) (*h, *replica) {
	x := s.open(t, storage.Options{Replication: true})
	x.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
	return x, newReplica(t)
}

// replica is a database rebuilt from captures as the kernel's history
// would rebuild it: each capture one transaction of an Image.
type replica struct {
	t    *testing.T
	path string
	ck   history.Checksums
	im   *history.Image
	txid uint64
}

func newReplica(t *testing.T) *replica {
	path := filepath.Join(t.TempDir(), "replica.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	im, err := history.NewImage(f)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{t: t, path: path, im: im}
}

// capture captures db (all pages with all) and applies the capture.
func (r *replica) capture(db storage.DB, all bool) storage.CaptureInfo {
	r.t.Helper()
	var pages []history.Page
	var sizeErr string
	fn := func(pgno uint32, data []byte) error {
		pages = append(pages, history.Page{Pgno: pgno, Data: bytes.Clone(data)})
		return nil
	}
	capture := db.Capture
	if all {
		capture = db.CaptureAll
	}
	info, err := capture(context.Background(), fn)
	if err != nil {
		r.t.Fatalf("capture: %v", err)
	}
	for i, p := range pages {
		switch {
		case len(p.Data) != int(info.PageSize):
			sizeErr = fmt.Sprintf("page %d holds %d bytes, the page size is %d", p.Pgno, len(p.Data), info.PageSize)
		case p.Pgno == 0 || p.Pgno > info.Pages:
			sizeErr = fmt.Sprintf("page %d is outside the database's %d pages", p.Pgno, info.Pages)
		case i > 0 && p.Pgno <= pages[i-1].Pgno:
			sizeErr = fmt.Sprintf("page %d after page %d", p.Pgno, pages[i-1].Pgno)
		}
	}
	if sizeErr != "" {
		r.t.Fatalf("capture: %s", sizeErr)
	}
	if info.Changed != len(pages) {
		r.t.Errorf("capture: Changed is %d, %d pages were passed", info.Changed, len(pages))
	}
	if info.Transactions == 0 {
		if len(pages) != 0 {
			r.t.Fatalf("capture of no transaction passed %d pages", len(pages))
		}
		return info
	}
	pre := r.ck.Sum()
	post, err := r.ck.Apply(info.PageSize, info.Pages, pages)
	if err != nil {
		r.t.Fatalf("capture %d does not apply to the replica: %v", r.txid+1, err)
	}
	r.txid++
	f := &history.File{PageSize: info.PageSize, Commit: info.Pages, MinTXID: r.txid, MaxTXID: r.txid, PreApply: pre, PostApply: post, Pages: pages}
	if err := r.im.Apply(f); err != nil {
		r.t.Fatalf("capture %d does not apply to the replica: %v", r.txid, err)
	}
	return info
}

func (r *replica) bytes() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// wantEmpty fails unless a capture of db holds nothing.
func (r *replica) wantEmpty(db storage.DB, what string) {
	r.t.Helper()
	if info := r.capture(db, false); info.Transactions != 0 || info.Changed != 0 {
		r.t.Errorf("a capture %s: %d transactions, %d pages, want none", what, info.Transactions, info.Changed)
	}
}

// finish captures what x committed since the last capture, checks the
// replica against x's database, page for page, and restores it as another
// actor, which must hold the same rows of t.
func (r *replica) finish(x *h) {
	r.t.Helper()
	r.capture(x.db, false)
	want := x.rowsOf("t")
	x.checkpointClose()
	r.wantSame(x.snapshot())
	r.wantRestores(x, want)
}

// wantSame fails unless the replica is db, page for page.
func (r *replica) wantSame(db []byte) {
	r.t.Helper()
	got := r.bytes()
	if bytes.Equal(got, db) {
		return
	}
	ps := 4096
	if len(db) >= 18 {
		if ps = int(db[16])<<8 | int(db[17]); ps == 1 {
			ps = 65536
		}
	}
	for p := 0; p*ps < max(len(got), len(db)); p++ {
		a, b := pageOf(got, p, ps), pageOf(db, p, ps)
		if !bytes.Equal(a, b) {
			r.t.Fatalf("the replica from the captures is %d pages, the database %d; page %d differs first", len(got)/ps, len(db)/ps, p+1)
		}
	}
	r.t.Fatalf("the replica from the captures is %d bytes, the database %d", len(got), len(db))
}

func pageOf(b []byte, p, ps int) []byte {
	if (p+1)*ps > len(b) {
		return nil
	}
	return b[p*ps : (p+1)*ps]
}

// wantRestores restores the replica as a new actor and checks it: SQLite's
// integrity check and the rows of t.
func (r *replica) wantRestores(x *h, want string) {
	r.t.Helper()
	a := abi.Address{Tenant: x.addr.Tenant, Class: x.addr.Class, Name: x.addr.Name + "-restored"}
	if err := x.drv.Restore(context.Background(), x.root, a, bytes.NewReader(r.bytes())); err != nil {
		r.t.Fatalf("Restore from the captures: %v", err)
	}
	y := &h{t: r.t, drv: x.drv, root: x.root, addr: a, opts: x.opts}
	y.reopen()
	if ok := y.query("PRAGMA integrity_check").one(); string(ok.Bytes) != "ok" {
		r.t.Errorf("the database restored from the captures: integrity_check says %q", ok.Bytes)
	}
	if got := y.rowsOf("t"); got != want {
		r.t.Errorf("the database restored from the captures holds other rows than the original")
	}
	y.db.Close()
}

// rowsOf is every row of table, as text.
func (x *h) rowsOf(table string) string {
	x.t.Helper()
	var b strings.Builder
	for _, row := range x.query("SELECT * FROM " + table + " ORDER BY rowid").vals {
		for _, v := range row {
			fmt.Fprintf(&b, "%d:%d:%g:%x|", v.Kind, v.Int, v.Float, v.Bytes)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// fill inserts n rows of t(v), each a random blob of size bytes.
func (x *h) fill(n, size int) {
	x.t.Helper()
	for range n {
		x.exec("INSERT INTO t(v) VALUES(randomblob(?))", I(int64(size)))
	}
}

// checkpointClose checkpoints the database (everything captured) and closes it.
func (x *h) checkpointClose() {
	x.t.Helper()
	if err := x.db.Checkpoint(context.Background()); err != nil {
		x.t.Fatalf("Checkpoint: %v", err)
	}
	if err := x.db.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
}

// snapshot is the closed database, as Snapshot writes it.
func (x *h) snapshot() []byte {
	x.t.Helper()
	return snapshotOf(x.t, x.drv, x.root, x.addr)
}
