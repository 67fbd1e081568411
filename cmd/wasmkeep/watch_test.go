package main

import (
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// TestEventWatchesWithoutGoroutines: the watches that stop an event's
// guest calls and statements at a limit (the engine's on each call's ctx,
// storage's on the ctx its statements run under) start no goroutine in an
// event that ends normally. A request over HTTP starts one of its own (the
// server's background read), a new actor's two more (the actor's, and the
// next spare instance's). Before, storage's context.AfterFunc ran at each
// call's end, which ended its ctx, and wazero started a goroutine per
// call: 8 a new actor's first request and 3 a resident actor's on wazero,
// 5 and 2 on Wasmtime.
func TestEventWatchesWithoutGoroutines(t *testing.T) {
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	for _, engine := range bothEngines(t) {
		t.Run(engine, func(t *testing.T) {
			n := startNodeOn(t, engine, node.Options{Classes: map[string]string{"probe": probe(t)}})
			n.expect("GET", "/actor/probe/warm/init-runs", "", 200, "1")
			const requests = 200
			before := created()
			for i := range requests {
				n.expect("GET", "/actor/probe/new-"+strconv.Itoa(i)+"/init-runs", "", 200, "1")
			}
			if got := float64(created()-before) / requests; got > 4.5 {
				t.Errorf("a new actor's first request started %.1f goroutines; want 3", got)
			}
			before = created()
			for range requests {
				n.expect("GET", "/actor/probe/warm/init-runs", "", 200, "1")
			}
			if got := float64(created()-before) / requests; got > 1.8 {
				t.Errorf("a resident actor's request started %.1f goroutines; want 1", got)
			}
		})
	}
}
