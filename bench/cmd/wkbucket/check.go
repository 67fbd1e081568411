//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// checkClients write at once during the durability check, each to actors
// of its own, one write at a time.
const checkClients, checkActorsPerClient = 8, 2

// durability is the check on st: a clean stop, then a SIGKILL, each
// followed by a start on an empty data directory. lost counts the
// acknowledged values missing after it; on the local store (no bucket) the
// control, every one must be.
func (c *config) durability(stdout io.Writer, st *store) ([]measure.Row, error) {
	srv := c.server(st, "check")
	acked := make([]int64, checkClients*checkActorsPerClient) // last acknowledged value per actor
	name := func(i int) string { return fmt.Sprintf("k-%d", i) }

	// writes sends durable writes from every client until stop is set or,
	// with limit > 0, each client sent its share of limit (rounded up: every
	// actor gets one when limit is at least the actors, however the clients
	// are scheduled), and returns how many were acknowledged. A client
	// stops at its first failure (the server was killed), which is returned.
	writes := func(n *node, limit int64, stop *atomic.Bool) (int64, error) {
		var ok atomic.Int64
		var failure atomic.Pointer[error]
		var wg sync.WaitGroup
		share := int((limit + checkClients - 1) / checkClients)
		for cl := range checkClients {
			wg.Go(func() {
				for j := 0; !stop.Load() && (limit <= 0 || j < share); j++ {
					a := cl*checkActorsPerClient + j%checkActorsPerClient
					v, err := n.durableWrite(name(a))
					if err != nil {
						failure.CompareAndSwap(nil, &err)
						return
					}
					acked[a] = v
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		if e := failure.Load(); e != nil {
			return ok.Load(), *e
		}
		return ok.Load(), nil
	}
	// restart starts a node on an empty data directory and counts the
	// acknowledged values it lacks, and the writes beyond them it has
	// (in flight when the server was killed: not acknowledged, landed).
	restart := func() (lost, landed int, err error) {
		dir, err := c.dataDir("check-" + st.kind)
		if err != nil {
			return 0, 0, err
		}
		n, err := start(srv, dir)
		if err != nil {
			return 0, 0, err
		}
		defer n.Stop()
		for a, want := range acked {
			v, err := n.get(name(a))
			if err != nil {
				return 0, 0, n.fail(err)
			}
			switch {
			case v < want:
				lost++
			case v > want:
				landed++
				acked[a] = v
			}
		}
		return lost, landed, n.Stop()
	}

	dir, err := c.dataDir("check-" + st.kind)
	if err != nil {
		return nil, err
	}
	n, err := start(srv, dir)
	if err != nil {
		return nil, err
	}
	var never atomic.Bool
	done, err := writes(n, int64(c.checkWrites), &never)
	if err != nil {
		n.Stop()
		return nil, n.fail(err)
	}
	if err := n.Stop(); err != nil {
		return nil, err
	}
	os.RemoveAll(filepath.Dir(dir))
	lostStop, _, err := restart()
	if err != nil {
		return nil, err
	}
	if st.kind == "local" {
		clear(acked) // the control restarts from nothing, as a node without a bucket does
	}

	// The same after a SIGKILL at a random moment of the writes.
	if dir, err = c.dataDir("check-" + st.kind); err != nil {
		return nil, err
	}
	if n, err = start(srv, dir); err != nil {
		return nil, err
	}
	// Every actor written once before the kill's clock starts, so that the
	// control has a value of each to lose (with the kill 300 ms in, the
	// first writes' activations left some actors unwritten, and the
	// control lost 10 of 16).
	warm, err := writes(n, int64(len(acked)), &never)
	if err != nil {
		n.Stop()
		return nil, n.fail(err)
	}
	var stop atomic.Bool
	var killed int64
	go func() {
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		n.Kill()
		stop.Store(true)
	}()
	killed, _ = writes(n, 0, &stop) // the kill fails the writes in flight
	killed += warm
	os.RemoveAll(filepath.Dir(dir))
	lostKill, landed, err := restart()
	if err != nil {
		return nil, err
	}
	actors := len(acked)
	verdict := "none lost"
	switch {
	case st.kind == "local" && lostStop == actors && lostKill == actors:
		verdict = "all lost, as the control must (no bucket)"
	case st.kind == "local":
		verdict = "the control kept values without a bucket: the check proves nothing"
	case lostStop+lostKill > 0:
		verdict = "LOST ACKNOWLEDGED WRITES"
	}
	fmt.Fprintf(stdout, "\ndurability check on %s, %d actors: %d durable writes, clean stop, data directory deleted, start: %d of %d actors' acknowledged values lost; "+
		"%d more, SIGKILL, data directory deleted, start: %d lost (%d unacknowledged writes landed): %s\n",
		st.kind, actors, done, lostStop, actors, killed, lostKill, landed, verdict)
	return []measure.Row{
		row("check_lost_after_stop_"+st.kind, float64(lostStop), "actors"),
		row("check_lost_after_kill_"+st.kind, float64(lostKill), "actors"),
		row("check_writes_before_kill_"+st.kind, float64(killed), "writes"),
	}, nil
}
