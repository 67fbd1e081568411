package replication

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
)

// Uploads: a hanging attempt is given up and sent again; a lost reply is
// recognised by reading the object back; three failures end the stream
// with an unknown outcome, never a resend with other bytes. (Planted bugs:
// a precondition after a lost reply taken as success without reading back,
// or as ErrExists, fail the second case.)
func TestUploadAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, st, db, rng := start(t, 5)

		randomTxn(db, rng)
		w.fb.Next(faulty.Put, w.prefix, faulty.Hang)
		done := make(chan error, 1)
		go func() { _, err := st.Ship(context.Background()); done <- err }()
		w.clk.Step(UploadAttempt)
		select {
		case err := <-done:
			t.Fatalf("the upload ended inside its first attempt's bound: %v", err)
		default:
		}
		w.clk.Step(2 * time.Second)
		if err := <-done; err != nil {
			t.Fatalf("a hanging first attempt, then one that succeeds: %v", err)
		}

		randomTxn(db, rng)
		w.fb.Next(faulty.Put, w.prefix, faulty.LostReply)
		if sh, err := st.Ship(context.Background()); err != nil || sh.Key.TXID != 2 {
			t.Fatalf("a lost reply, then a resend refused by its own landed object: %v %s", err, sh.Key)
		}

		randomTxn(db, rng)
		for range UploadAttempts {
			w.fb.Next(faulty.Put, w.prefix, faulty.Fail)
		}
		if _, err := st.Ship(context.Background()); !errors.Is(err, ErrUnknown) || !errors.Is(st.Err(), ErrDone) {
			t.Fatalf("three failed attempts: %v (stream: %v), want an unknown outcome that ends the stream", err, st.Err())
		}
		// The hung attempt, the lost reply, then the failed attempts: the
		// book's statuses count each as an error.
		if n := w.count("put error"); n != UploadAttempts+2 {
			t.Errorf("%d failed puts, want %d", n, UploadAttempts+2)
		}
		if head := st.Head(); head.TXID != 2 {
			t.Errorf("head %s after a failed upload, want transaction 2", head)
		}
	})
}

// A key some other write took (a generation reused) is never overwritten
// and ends the stream.
func TestUploadNeverOverwrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.write(addr, 1, 3, 1)
		// A second stream at the same generation on the same head: its
		// segment at transaction 4 would be another's key.
		r := w.node(newDriver())
		st, db := w.open(r, 1, newHold())
		randomTxn(db, rand.New(rand.NewPCG(1, 1)))
		other, db2 := w.open(w.node(newDriver()), 1, newHold())
		randomTxn(db2, rand.New(rand.NewPCG(2, 2)))
		mustShip(t, other)
		if _, err := st.Ship(context.Background()); !errors.Is(err, ErrExists) {
			t.Fatalf("a create over another's object: %v, want ErrExists", err)
		}
	})
}

// A capture that fails leaves the stream where it was: the next Ship
// ships the same transactions with the later ones, and a restore holds
// them all. (Planted bug: a stream that ends on a capture error fails the
// second Ship.)
func TestCaptureFailureKeepsPosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, st, db, rng := start(t, 6)
		randomTxn(db, rng)
		mustShip(t, st)
		randomTxn(db, rng)
		db.FailNextCapture(errors.New("disk error"))
		if _, err := st.Ship(context.Background()); err == nil || errors.Is(err, ErrDone) || st.Err() != nil {
			t.Fatalf("a failed capture: %v (stream: %v), want an error that keeps the stream", err, st.Err())
		}
		randomTxn(db, rng)
		if sh := mustShip(t, st); sh.Key.TXID != 2 {
			t.Fatalf("the next ship wrote %s, want transaction 2", sh.Key)
		}
		want := db.Pages()
		st.Close(context.Background())
		db.Close()
		drv := newDriver()
		_, db3 := w.open(w.node(drv), 2, newHold())
		if !sameState(db3.Pages(), want) {
			t.Fatal("the restore lacks the transactions of the failed capture")
		}
	})
}

// An abandoned stream ships nothing more, not even at Close: a restore
// holds what was shipped before, not the commit after it (what the alarm
// index could not list). (Planted bug: an Abandon that leaves the stream running.)
func TestAbandonShipsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, st, db, rng := start(t, 6)
		randomTxn(db, rng)
		mustShip(t, st)
		want, head := db.Pages(), st.Head()
		randomTxn(db, rng)
		st.Abandon(errors.New("the alarm could not be listed"))
		if _, err := st.Ship(context.Background()); !errors.Is(err, ErrDone) {
			t.Fatalf("a Ship after Abandon: %v, want ErrDone", err)
		}
		if err := st.Close(context.Background()); err != nil || st.Head() != head {
			t.Fatalf("Close after Abandon: %v at %s, want nothing shipped from %s", err, st.Head(), head)
		}
		db.Close()
		_, db2 := w.open(w.node(newDriver()), 2, newHold())
		if !sameState(db2.Pages(), want) {
			t.Fatal("the restore holds the commit made after the last Ship")
		}
	})
}

// A failed periodic snapshot is counted, fails nothing, and is tried again
// only after a write and 30 s, then 8 writes later, then 64; a success
// resets the count. (Planted bugs: retrying at every event, or forgetting
// the wait across a hibernation on the same node, fail it.)
func TestSnapshotRetrySchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		r := w.node(newDriver())
		st, db := w.open(r, 1, newHold())
		rng := rand.New(rand.NewPCG(8, 8))
		event := func() {
			randomTxn(db, rng)
			mustShip(t, st)
			if _, err := st.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		for range SnapshotSegments - 1 {
			event()
		}
		w.fb.Next(faulty.Put, w.prefix+"snapshot/", faulty.Fail)
		event()
		if w.snapFail != 1 {
			t.Fatalf("%d snapshot failures counted, want 1", w.snapFail)
		}
		// Hibernate and wake on the same node: the wait is remembered.
		st.Close(context.Background())
		db.Close()
		st, db = w.open(r, 2, newHold())
		if ok, _ := st.Snapshot(context.Background()); ok || w.snapFail != 1 {
			t.Fatal("a snapshot tried again without a write")
		}
		event()
		if w.snapFail != 1 || len(snapshots(w)) != 0 {
			t.Fatal("a snapshot tried again within 30 s")
		}
		w.clk.Step(SnapshotRetryWait)
		w.fb.Next(faulty.Put, w.prefix+"snapshot/", faulty.Fail)
		event()
		if w.snapFail != 2 {
			t.Fatalf("no second try after a write and 30 s (%d failures)", w.snapFail)
		}
		w.clk.Step(SnapshotRetryWait)
		for range 7 {
			event()
		}
		if w.snapFail != 2 || len(snapshots(w)) != 0 {
			t.Fatal("a third try before 8 writes")
		}
		randomTxn(db, rng)
		mustShip(t, st)
		if ok, _ := st.Snapshot(context.Background()); !ok {
			t.Fatal("no third try 8 writes after the second failure")
		}
		synctest.Wait()
		if s := snapshots(w); len(s) != 1 || s[0].Gen != 2 {
			t.Fatalf("snapshots %v, want one of generation 2", s)
		}
	})
}

func snapshots(w *world) []history.Key {
	var out []history.Key
	for _, k := range w.keys() {
		if key, err := history.ParseRel(k); err == nil && key.Kind == history.Snapshot {
			out = append(out, key)
		}
	}
	return out
}

// A delete: the reset on the head, then the snapshot at it and the
// erasure, leave exactly those two objects, and a later start restores
// the empty database. (Planted bugs: an erase with the retention window,
// or one that collects the reset segment, fail it.)
func TestDeleteResetAndErase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.write(addr, 1, 70, 2)
		st, db := w.open(w.node(newDriver()), 2, newHold())
		rng := rand.New(rand.NewPCG(3, 3))
		randomTxn(db, rng)
		mustShip(t, st)
		head := st.Head()
		// The empty database the node builds in scratch space.
		scratch := newDriver()
		edb, _ := scratch.Open(context.Background(), "", addr, optsRepl)
		edb.(*fakeDB).Commit(1, map[uint32][]byte{1: make([]byte, pageSize)})
		empty := edb.(*fakeDB).Pages()
		if err := st.Reset(context.Background(), edb.(*fakeDB)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Ship(context.Background()); !errors.Is(err, ErrDeleted) {
			t.Fatalf("a ship after the reset: %v, want ErrDeleted", err)
		}
		// Every object is younger than the window, which the erase ignores.
		st.r.cfg.Bucket = &freshBucket{st.r.cfg.Bucket, w.clk}
		st.r.cfg.Retention = time.Hour
		if err := st.Erase(context.Background()); err != nil {
			t.Fatal(err)
		}
		reset := history.Key{Kind: history.Segment, TXID: head.TXID + 1, Gen: 2, Parent: 2}
		snap := history.Key{Kind: history.Snapshot, TXID: head.TXID + 1, Gen: 2}
		if k := w.keys(); len(k) != 2 || k[0] != snap.Rel() || k[1] != reset.Rel() {
			t.Fatalf("after the erase the bucket holds %v, want the reset %s and its snapshot", k, reset)
		}
		// No key tells the two apart from any actor's history: a deleted
		// actor still exists for the access rule existing (book ADR 0028).
		if ok, err := w.node(newDriver()).Exists(context.Background(), addr); !ok || err != nil {
			t.Fatalf("a deleted actor's existence: %v %v, want it to exist", ok, err)
		}
		_, db2 := w.open(w.node(newDriver()), 3, newHold())
		if !sameState(db2.Pages(), empty) {
			t.Fatal("a restore after the delete is not the empty database")
		}
	})
}

// freshBucket lists every object as written just now.
type freshBucket struct {
	bucket.Bucket
	clk clock.Clock
}

func (b *freshBucket) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	p, err := b.Bucket.List(ctx, prefix, opts)
	for i := range p.Entries {
		p.Entries[i].ModTime = b.clk.Now()
	}
	return p, err
}

// An actor the bucket has no history of, whose local database holds data
// written before (a single node joining a cluster): an event that writes
// nothing uploads nothing (it would create the actor empty), and the first
// write uploads a first segment of every page, from which another node
// restores everything. (Planted bug: a first Ship that captures only the
// changed pages leaves a restore without the older ones.)
func TestFirstSegmentHoldsTheLocalDatabase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		drv := newDriver()
		rng := rand.New(rand.NewPCG(4, 4))
		db0, _ := drv.Open(context.Background(), "", addr, optsRepl)
		for range 5 {
			randomTxn(db0.(*fakeDB), rng)
		}
		db0.(*fakeDB).MarkCaptured()
		db0.Checkpoint(context.Background())
		db0.Close()
		st, db := w.open(w.node(drv), 1, newHold())
		db.MarkCaptured() // nothing committed since the checkpoint
		if sh := mustShip(t, st); sh.Key != (history.Key{}) || len(w.keys()) != 0 {
			t.Fatalf("an event without writes uploaded %s", sh.Key)
		}
		randomTxn(db, rng)
		if sh := mustShip(t, st); sh.Key.TXID != 1 {
			t.Fatalf("the first write shipped %s, want transaction 1", sh.Key)
		}
		want := db.Pages()
		_, db2 := w.open(w.node(newDriver()), 2, newHold())
		if !sameState(db2.Pages(), want) {
			t.Fatal("a restore from the first segment lacks the local database's older pages")
		}
	})
}

// start is a world and a first hold's stream on a node of its own.
func start(t *testing.T, seed uint64) (*world, *Stream, *fakeDB, *rand.Rand) {
	w := newWorld(t)
	st, db := w.open(w.node(newDriver()), 1, newHold())
	return w, st, db, rand.New(rand.NewPCG(seed, seed))
}
