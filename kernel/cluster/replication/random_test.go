package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/faulty"
)

// run runs f on a goroutine of its own and steps the clock until it
// returns.
func (w *world) run(f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		if w.clk.Since() > 24*time.Hour {
			w.t.Fatal("a call that never returns")
		}
		w.clk.Step(simtestTick)
	}
}

const simtestTick = 50 * time.Millisecond

// Seeded runs of holds moving between two nodes over a bucket that fails,
// loses replies, hangs and holds writes that land later (after the hold
// ended, during the next one), with holds ending while their uploads are
// under way, periodic snapshots and collection with no retention: every
// restore holds the last acknowledged write (page 1 names each write and
// its parent, so "holds" means "descends from"), and no history breaks.
// A slow PUT of a hold that ended succeeds after the next owner listed
// (on the other node) and wrote: not acknowledged. Late landings and
// collection must occur. (Planted bug: acknowledging without the hold's
// check after the PUT fails at seed 1.)
func TestRandomFaultsKeepAcknowledgedWrites(t *testing.T) {
	late, acked, collected := 0, 0, 0
	for seed := uint64(1); seed <= 30; seed++ {
		synctest.Test(t, func(t *testing.T) {
			l, a, c := randomRun(t, seed)
			late += l
			acked += a
			collected += c
		})
	}
	t.Logf("%d acknowledged writes, %d writes landed late, %d objects collected", acked, late, collected)
	if late == 0 || acked == 0 || collected == 0 {
		t.Fatal("no late landing or no acknowledged write: the runs prove nothing")
	}
}

func randomRun(t *testing.T, seed uint64) (late, acked, collected int) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(seed, 99))
	w.fb.Random(seed, map[faulty.Kind]float64{faulty.Fail: 0.04, faulty.LostReply: 0.04, faulty.Hang: 0.02, faulty.Hold: 0.04})
	dl := &delayBucket{Bucket: w.b, direct: w.mem}
	nodes := []*Replicas{w.node(newDriver()), w.node(newDriver())}
	for _, n := range nodes {
		n.cfg.Bucket = dl
	}
	on := 0
	// A slow PUT of a hold that ended, succeeding after the next owner
	// listed: what the acknowledgement rule is for.
	var slow *slowShip
	parent := map[uint64]uint64{}
	var lastAcked uint64
	descends := func(id uint64) bool {
		for ; id != 0; id = parent[id] {
			if id == lastAcked {
				return true
			}
		}
		return lastAcked == 0
	}
	idOf := func(st [][]byte) uint64 {
		if len(st) == 0 {
			return 0
		}
		return binary.BigEndian.Uint64(st[0])
	}
	gen := uint64(0)
	for range 25 {
		gen++
		h := newHold()
		var st *Stream
		var db *fakeDB
		if slow == nil {
			on = rng.IntN(2)
		} else {
			on = 1 - on // the other node, while the slow one still holds its database
		}
		err := w.run(func() error {
			s, d, err := nodes[on].Open(context.Background(), addr, gen, h.valid)
			if err == nil {
				st, db = s, d.(*fakeDB)
			}
			return err
		})
		if errors.Is(err, history.ErrBroken) {
			t.Fatalf("seed %d, generation %d: %v", seed, gen, err)
		}
		if err != nil {
			slow.end(w, &lastAcked)
			slow = nil
			continue // a failed restore: the next hold tries again
		}
		if id := idOf(db.Pages()); !descends(id) {
			t.Fatalf("seed %d, generation %d restored write %x, which does not hold the acknowledged %x", seed, gen, id, lastAcked)
		}
		ended := false
		for e := range 1 + rng.IntN(12) {
			if e == 1 && slow != nil {
				slow.end(w, &lastAcked)
				slow = nil
			}
			if rng.IntN(5) == 0 {
				late += w.fb.Land()
			}
			cur := db.Pages()
			id := gen<<32 | uint64(e+1)
			parent[id] = idOf(cur)
			page := randomPage(rng)
			binary.BigEndian.PutUint64(page, id)
			pages := map[uint32][]byte{1: page}
			size := max(uint32(len(cur)), 1)
			if rng.IntN(3) == 0 {
				size++
				pages[size] = randomPage(rng)
			}
			if size > 1 {
				pages[2+uint32(rng.IntN(int(size-1)))] = randomPage(rng)
			}
			db.Commit(size, pages)
			if slow == nil && rng.IntN(12) == 0 {
				dl.arm()
				slow = &slowShip{id: id, done: make(chan error, 1), st: st, db: db, dl: dl}
				go func() { _, err := st.Ship(context.Background()); slow.done <- err }()
				w.clk.Step(time.Second)
				h.ok.Store(false)
				ended = true
				break
			}
			if rng.IntN(10) == 0 {
				// The hold ends while the upload is under way.
				w.clk.AfterFunc(time.Duration(rng.IntN(3000))*time.Millisecond, func() { h.ok.Store(false) })
			}
			err := w.run(func() error { _, err := st.Ship(context.Background()); return err })
			if err != nil {
				break
			}
			lastAcked = id
			acked++
			if err := w.run(func() error { _, err := st.Snapshot(context.Background()); return err }); err != nil {
				break
			}
		}
		if ended {
			continue
		}
		slow.end(w, &lastAcked)
		slow = nil
		w.run(func() error { return st.Close(context.Background()) })
		h.ok.Store(false)
		db.Close()
	}
	slow.end(w, &lastAcked)
	late += w.fb.Land()
	w.fb.Random(seed, nil)
	err := w.run(func() error {
		_, d, err := w.node(newDriver()).Open(context.Background(), addr, gen+1, func() bool { return true })
		if err == nil {
			if id := idOf(d.(*fakeDB).Pages()); !descends(id) {
				t.Errorf("seed %d: the last restore holds %x, not the acknowledged %x", seed, id, lastAcked)
			}
		}
		return err
	})
	if err != nil {
		t.Fatalf("seed %d: the last restore: %v", seed, err)
	}
	return late, acked, w.collect
}

// delayBucket holds the next PUT once armed until it is let go, then
// applies it whatever its caller's context says and returns its result:
// a slow request that still succeeds.
type delayBucket struct {
	bucket.Bucket
	direct  bucket.Bucket // where a held PUT lands, without faults
	mu      sync.Mutex
	armed   bool
	release chan struct{}
}

func (b *delayBucket) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed, b.release = true, make(chan struct{})
}

func (b *delayBucket) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	b.mu.Lock()
	armed, rel := b.armed, b.release
	b.armed = false
	b.mu.Unlock()
	if !armed {
		return b.Bucket.Put(ctx, key, body, size, cond)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	<-rel
	return b.direct.Put(context.Background(), key, bytes.NewReader(data), size, cond)
}

// slowShip is a Ship whose PUT the delayBucket holds.
type slowShip struct {
	id   uint64
	done chan error
	st   *Stream
	db   *fakeDB
	dl   *delayBucket
}

// end lets the PUT go and records the write as acknowledged if the stream
// acknowledged it, then ends the old hold.
func (s *slowShip) end(w *world, lastAcked *uint64) {
	if s == nil {
		return
	}
	close(s.dl.release)
	if err := w.run(func() error { return <-s.done }); err == nil {
		*lastAcked = s.id
	}
	w.run(func() error { return s.st.Close(context.Background()) })
	s.db.Close()
}
