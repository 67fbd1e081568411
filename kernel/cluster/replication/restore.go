package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/superfly/ltx"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Open is a hold's start (a wake, a takeover, the first event after a
// start): restore steps 1 to 7 of book ADR 0007, then the actor's database
// opened for replication and the hold's stream on it.
//
// It lists the actor's prefix once and plans the restore from the key
// names. With no history in the bucket the local database, if any, is
// used as it is (its first Ship uploads all of it). Otherwise the local
// database is used only if it is the bucket's head: its checksum, read
// from the database through the driver (CaptureAll), equals the head's
// post-apply checksum, read from the head object's trailer. If not, every
// object of the plan is read (read-ahead, the node's limiter, the silence
// rule, three tries), the chain rebuilt in a file under TempDir, and the
// driver's Restore puts it in place (keeping the old database as its
// ".replaced").
//
// A hold whose generation is below one the history holds is refused
// (ErrBehind): its writes could not follow that history's head.
//
// A broken history is an error wrapping history.ErrBroken (a
// *history.BrokenError): the actor is degraded and refuses its events, and
// nothing was changed. Any other error is a failed restore: nothing was
// written to the bucket, the local database was not replaced (or, if the
// driver's swap failed, is not used unchecked by the next Open); the caller
// releases the hold and the next event tries again from a fresh listing.
func (r *Replicas) Open(ctx context.Context, addr abi.Address, gen uint64, valid Valid) (*Stream, storage.DB, error) {
	start := r.cfg.Clock.Now()
	st, db, err := r.open(ctx, addr, gen, valid)
	r.cfg.Metrics.restore(r.cfg.Clock.Now().Sub(start), err)
	return st, db, err
}

// Exists reports whether the actor has any history in the bucket, for the
// access rule existing (book ADR 0010): one listing of its prefix that
// reads no further than the first key, given up after ReadSilence and
// not sent again (the refused request's client retries). A deleted
// actor's reset and its snapshot are history too, so it still exists
// (book ADR 0028): no key tells them apart from any other.
func (r *Replicas) Exists(ctx context.Context, addr abi.Address) (bool, error) {
	lctx, cancel := clock.WithTimeout(ctx, r.cfg.Clock, ReadSilence)
	defer cancel()
	return history.Exists(lctx, r.cfg.Bucket, Actor(addr))
}

func (r *Replicas) open(ctx context.Context, addr abi.Address, gen uint64, valid Valid) (*Stream, storage.DB, error) {
	a := Actor(addr)
	prefix, err := history.Prefix(a)
	if err != nil {
		return nil, nil, err
	}
	entries, err := list(ctx, r.cfg.Bucket, r.cfg.Clock, prefix)
	if err != nil {
		return nil, nil, err
	}
	l, err := history.ParseListing(prefix, entries)
	if err != nil {
		return nil, nil, err
	}
	if g := l.Generation(); gen < g {
		return nil, nil, fmt.Errorf("%w: generation %d, the history holds generation %d", ErrBehind, gen, g)
	}
	plan, err := history.PlanRestore(l)
	if err != nil {
		return nil, nil, err
	}
	opts := r.cfg.Options
	opts.Replication = true
	start := Start{Head: plan.Head, SinceSnapshot: len(plan.Segments)}
	for _, o := range plan.Segments {
		start.SinceBytes += o.Entry.Size
	}
	var db storage.DB
	if !plan.Empty() {
		if db, start.Sums, err = r.localHead(ctx, addr, opts, plan); err != nil {
			return nil, nil, err
		}
		if db == nil {
			if start.Sums, err = r.rebuild(ctx, addr, plan); err != nil {
				return nil, nil, err
			}
		}
	}
	if db == nil {
		if db, err = r.cfg.Driver.Open(ctx, r.cfg.Root, addr, opts); err != nil {
			return nil, nil, err
		}
	}
	st, err := r.NewStream(a, gen, valid, db, start)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return st, db, nil
}

// headCheckMax is the largest head object localHead reads whole to compare
// its pages with the local database's; a larger one (a first segment of a
// large database) is compared by its trailer's checksum and its page count
// alone.
const headCheckMax = 32 << 20

// localHead returns the local database, open, and its checksums if it is
// the plan's head; no database if it is not (or there is none). The
// database stays open from the check on, its log checkpointed (everything
// in it is the head's), so no commit the head holds is captured again.
//
// LTX's database checksum is an XOR of page checksums, linear in the pages'
// bytes: two pages changed by the same bytes at the same offsets cancel, so
// an older database can have the head's checksum (the simulation met one).
// So the head object is read whole and the local database is the head only
// if, besides the checksum, it has the head's page count and every page the
// head wrote, byte for byte: a database missing the head's transaction
// differs in the pages it wrote.
func (r *Replicas) localHead(ctx context.Context, addr abi.Address, opts storage.Options, plan history.Plan) (storage.DB, *history.Checksums, error) {
	ok, err := r.cfg.Driver.Exists(ctx, r.cfg.Root, addr)
	if err != nil || !ok {
		return nil, nil, err
	}
	objs := plan.Objects()
	head := objs[len(objs)-1].Entry
	if head.Size < ltx.TrailerSize {
		return nil, nil, &history.BrokenError{Head: plan.Head, At: plan.Head, What: fmt.Sprintf("%s holds %d bytes, less than an LTX trailer", head.Key, head.Size)}
	}
	var want ltx.Checksum
	var commit uint32
	var pages map[uint32][]byte // the head's pages, nil for a head too large to read whole
	if head.Size <= headCheckMax {
		data, err := read(ctx, r.cfg.Bucket, r.cfg.Clock, r.cfg.Reads, head.Key, head.Size, bucket.GetOptions{}, nil)
		if err != nil {
			return nil, nil, err
		}
		f, err := history.Decode(bytes.NewReader(data))
		if err != nil {
			return nil, nil, &history.BrokenError{Head: plan.Head, At: plan.Head, What: fmt.Sprintf("%s: %v", head.Key, err)}
		}
		want, commit, pages = f.PostApply, f.Commit, make(map[uint32][]byte, len(f.Pages))
		for _, p := range f.Pages {
			pages[p.Pgno] = p.Data
		}
	} else {
		tr, err := read(ctx, r.cfg.Bucket, r.cfg.Clock, r.cfg.Reads, head.Key, head.Size, bucket.GetOptions{Offset: head.Size - ltx.TrailerSize, Length: ltx.TrailerSize}, nil)
		if err != nil {
			return nil, nil, err
		}
		if len(tr) != ltx.TrailerSize {
			return nil, nil, fmt.Errorf("replication: %s: a trailer of %d bytes", head.Key, len(tr))
		}
		want = ltx.Checksum(binary.BigEndian.Uint64(tr))
	}
	db, err := r.cfg.Driver.Open(ctx, r.cfg.Root, addr, opts)
	if err != nil {
		return nil, nil, nil // restored over; the driver's Restore says if it cannot
	}
	same := true
	sums, err := checksumsOf(ctx, db, func(pgno uint32, data []byte) {
		if p, ok := pages[pgno]; ok && !bytes.Equal(p, data) {
			same = false
		}
	})
	if err != nil || !same || sums.Sum() != want || (pages != nil && sums.Pages() != commit) {
		db.Close()
		return nil, nil, nil // not the head, or not readable: restored over
	}
	if err := db.Checkpoint(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, sums, nil
}

// checksumsOf is the checksums of every page of db, taken in chunks so a
// large database is never in memory whole; each page is also shown to see.
func checksumsOf(ctx context.Context, db storage.Replicator, see func(pgno uint32, data []byte)) (*history.Checksums, error) {
	const chunk = 1024
	sums := &history.Checksums{}
	var pages []history.Page
	var pageSize uint32
	flush := func() error {
		if len(pages) == 0 {
			return nil
		}
		_, err := sums.Apply(pageSize, pages[len(pages)-1].Pgno, pages)
		pages = pages[:0]
		return err
	}
	info, err := db.CaptureAll(ctx, func(pgno uint32, data []byte) error {
		if pageSize == 0 {
			pageSize = uint32(len(data))
		}
		see(pgno, data)
		pages = append(pages, history.Page{Pgno: pgno, Data: append([]byte(nil), data...)})
		if len(pages) == chunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil && info.Pages > sums.Pages() {
		_, err = sums.Apply(info.PageSize, info.Pages, nil) // ends at the lock page
	}
	if err != nil {
		return nil, err
	}
	return sums, nil
}

// rebuild reads the plan's objects and rebuilds the database in a
// temporary file, then has the driver put it in place.
func (r *Replicas) rebuild(ctx context.Context, addr abi.Address, plan history.Plan) (*history.Checksums, error) {
	f, err := os.CreateTemp(r.cfg.TempDir, "restore-*.db")
	if err != nil {
		return nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ra := r.readAhead(rctx, plan.Objects())
	im, err := history.RebuildImage(plan, ra.open, f)
	cancel()
	ra.wait()
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := r.cfg.Driver.Restore(ctx, r.cfg.Root, addr, f); err != nil {
		return nil, fmt.Errorf("replication: put the restored database of %s in place: %w", Actor(addr), err)
	}
	return im.Checksums(), nil
}

// readAheadState reads a plan's objects ahead of the one applied: up to
// ReadAhead of them and ReadAheadBytes by the listing's sizes (always at
// least one), each under the node's limiter.
type readAheadState struct {
	ctx     context.Context
	clk     clock.Clock
	objs    []history.Object
	results []chan readResult
	extra   []atomic.Int64 // per object: what other restores added to its tries' limits
	left    time.Duration  // of the restore's deadline (restore step 7)
	mu      sync.Mutex
	space   chan struct{} // a read's budget was given back
	taken   int           // objects handed to Rebuild
	wg      sync.WaitGroup
}

type readResult struct {
	data []byte
	err  error
}

func (r *Replicas) readAhead(ctx context.Context, objs []history.Object) *readAheadState {
	ra := &readAheadState{
		ctx: ctx, clk: r.cfg.Clock, objs: objs, results: make([]chan readResult, len(objs)),
		extra: make([]atomic.Int64, len(objs)), left: deadline(objs), space: make(chan struct{}, 1),
	}
	for i := range ra.results {
		ra.results[i] = make(chan readResult, 1)
	}
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		var inFlight int64
		for i, o := range objs {
			for {
				ra.mu.Lock()
				ahead := i - ra.taken
				inFlight = 0
				for j := ra.taken; j < i; j++ {
					inFlight += objs[j].Entry.Size
				}
				ra.mu.Unlock()
				if ahead == 0 || (ahead < ReadAhead && inFlight+o.Entry.Size <= ReadAheadBytes) {
					break
				}
				select {
				case <-ra.space:
				case <-ctx.Done():
					return
				}
			}
			ra.wg.Add(1)
			go func(i int, o history.Object) {
				defer ra.wg.Done()
				start := r.cfg.Clock.Now()
				data, err := read(ctx, r.cfg.Bucket, r.cfg.Clock, r.cfg.Reads, o.Entry.Key, o.Entry.Size, bucket.GetOptions{}, &ra.extra[i])
				if err == nil {
					r.cfg.Metrics.restoreRead(r.cfg.Clock.Now().Sub(start))
				}
				ra.results[i] <- readResult{data, err}
			}(i, o)
		}
	}()
	return ra
}

// open hands Rebuild the next object, in the plan's order.
func (ra *readAheadState) open(o history.Object) (io.ReadCloser, error) {
	ra.mu.Lock()
	i := ra.taken
	ra.mu.Unlock()
	if i >= len(ra.objs) || ra.objs[i].Key != o.Key {
		return nil, errors.New("replication: objects asked out of the plan's order")
	}
	res, err := ra.await(i)
	if err != nil {
		return nil, err
	}
	ra.mu.Lock()
	ra.taken++
	ra.mu.Unlock()
	select {
	case ra.space <- struct{}{}:
	default:
	}
	if res.err != nil {
		return nil, res.err
	}
	return io.NopCloser(bytes.NewReader(res.data)), nil
}

// deadline is a restore's deadline for its reads (restore step 7): 30 s,
// a second per started megabyte of its objects and a second per eight
// objects.
func deadline(objs []history.Object) time.Duration {
	var size int64
	for _, o := range objs {
		size += o.Entry.Size
	}
	return RestoreDeadline + mb(size)*time.Second + time.Duration((len(objs)+7)/8)*time.Second
}

// await waits for object i's read, counting the wait against the
// restore's deadline less what other restores' bytes added to the limits
// of its tries (up to the wait itself); past the deadline the restore
// fails.
func (ra *readAheadState) await(i int) (readResult, error) {
	start := ra.clk.Now()
	counted := func() time.Duration {
		waited := ra.clk.Now().Sub(start)
		return waited - min(time.Duration(ra.extra[i].Load()), waited)
	}
	for {
		t := ra.clk.NewTimer(ra.left - counted())
		select {
		case res := <-ra.results[i]:
			t.Stop()
			ra.left -= counted()
			return res, nil
		case <-ra.ctx.Done():
			t.Stop()
			return readResult{}, ra.ctx.Err()
		case <-t.C():
			if counted() >= ra.left {
				return readResult{}, fmt.Errorf("%w: %s", ErrDeadline, ra.objs[i].Entry.Key)
			}
		}
	}
}

// wait waits for every read started to end (after the context was
// cancelled, at once).
func (ra *readAheadState) wait() { ra.wg.Wait() }
