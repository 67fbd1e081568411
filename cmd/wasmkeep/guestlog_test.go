package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
)

// A guest that floods its stdout gets a burst of 100 lines, then what its
// 50 lines a second refill; the rest is dropped, counted, and announced.
func TestGuestLogIsRateLimited(t *testing.T) {
	tn := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}})
	n := tn.node
	start := time.Now()
	tn.expect("GET", "/actor/probe/a/flood?n=500", "", 200, "flooded")
	refilled := int(time.Since(start).Seconds()*50) + 1
	tn.stop() // ends the instance, which announces what was dropped

	log := tn.log.String()
	logged := strings.Count(log, `msg="flood `)
	if logged < 100 || logged > 100+refilled {
		t.Errorf("%d flood lines logged; want the burst, 100, plus at most %d refilled", logged, refilled)
	}
	dropped := 0
	for _, m := range regexp.MustCompile(`level=WARN msg="(\d+) lines dropped" actor=default/probe/a`).FindAllStringSubmatch(log, -1) {
		d, _ := strconv.Atoi(m[1])
		dropped += d
	}
	t.Logf("%d lines logged, %d dropped", logged, dropped)
	if logged+dropped != 500 {
		t.Errorf("%d logged and %d announced as dropped; want 500 in all", logged, dropped)
	}
	if n.GuestLogLines() != int64(logged) || n.GuestLogDropped() != int64(dropped) {
		t.Errorf("counters: %d logged, %d dropped; the log has %d and %d", n.GuestLogLines(), n.GuestLogDropped(), logged, dropped)
	}
}

func TestGuestLogRateZeroDiscards(t *testing.T) {
	tn := startNode(t, node.Options{Classes: map[string]string{"probe": probe(t)}, GuestLogRate: guestlog.Discard})
	n := tn.node
	tn.expect("GET", "/actor/probe/a/flood?n=500", "", 200, "flooded")
	tn.stop()
	if log := tn.log.String(); strings.Contains(log, `msg="flood `) || strings.Contains(log, "dropped") {
		t.Errorf("discarding, the log has guest output:\n%s", log)
	}
	if n.GuestLogLines() != 0 || n.GuestLogDropped() != 500 {
		t.Errorf("counters: %d logged, %d dropped; want 0, 500", n.GuestLogLines(), n.GuestLogDropped())
	}
}
