package main

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// Actors held by another node for longer than the limit are listed past
// it every pass (their records are rewritten only at acquire and
// release); their jobs find them held (ownership.ErrChanged) and are not
// tried again at that version, so they never fill a pass's budget ahead
// of an idle actor listed after them (ADR 1053). Here z holds s1 and s2,
// b's budget is two, and t, idle on b, expires. b's passes are further
// apart than its idle timeout, as by default (10 minutes, 30 s), so that
// a job's actor refused on b is gone by the next pass (while resident it
// is no candidate). Checked by hand: with the held records tried again
// each pass t never expires.
func TestIdleExpiryPastActorsHeldElsewhere(t *testing.T) {
	t.Parallel()
	engineNeutral(t)
	mem := buckettest.NewMemory(buckettest.Flaws{})
	classes := map[string]string{"probe": probe(t)}
	z, zm := clusterNode(t, mem, "z", node.Options{Classes: classes, Placement: placement.Local{}, IdleTimeout: time.Minute})
	go zm.WatchPeers(t.Context())
	for _, name := range []string{"s1", "s2"} { // listed before t
		z.expect("POST", "/actor/probe/"+name+"/token?t=x1", "", 200, "1")
	}
	clk := &offsetClock{}
	b, bm := clusterNode(t, mem, "b", node.Options{Classes: classes, Placement: placement.Local{}, Clock: clk,
		ExpiryPass: time.Second, ExpiryBudget: 2, IdleTimeout: 200 * time.Millisecond,
		ExpireAfterIdle: map[string]time.Duration{"probe": time.Hour}})
	go bm.WatchPeers(t.Context())
	b.expect("POST", "/actor/probe/t/token?t=x1", "", 200, "1")
	waitFor(t, 10*time.Second, "t to hibernate on b", func() bool { return len(bm.Owners.Holds()) == 0 })
	clk.off.Store(int64(time.Hour + time.Minute))
	expired := `wasmkeep_actor_deletes_total{how="expired"}`
	waitFor(t, 10*time.Second, "t to expire", func() bool { return b.metric(expired) >= 1 })
	if got := b.metric(expired); got != 1 {
		t.Errorf("expired %v actors, want t alone", got)
	}
	z.expect("GET", "/actor/probe/s1/tokens", "", 200, "x1\n")
}
