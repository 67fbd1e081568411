package main

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// Two actors looping on host calls, with one turn of the cores between
// them (ADR 1057): each is rationed once its CPU makes it heavy, one runs
// while the other waits for the turn, and a light actor's request is
// answered while both loops still run: it waits for no turn.
func TestFairTurns(t *testing.T) {
	t.Parallel()
	n := startNode(t, node.Options{
		Classes:       map[string]string{"hostile": hostile(t)},
		CPUTurns:      1,
		CPUBudget:     500 * time.Millisecond, // each loop runs for 1.5 s of CPU, which the test's close waits for
		HostCPUBudget: time.Second,
		WallClock:     time.Minute,
	})
	n.expect("GET", "/actor/hostile/light/hits", "", 200, "ok 1")
	ended := make(chan string, 2)
	for _, name := range []string{"h0", "h1"} {
		go func() {
			code, body := n.do("GET", "/actor/hostile/"+name+"/loop?call=bad-sql", "")
			ended <- name + ": " + body
			if code != 500 && code != 503 { // stopped by its cap, or by the node's close
				t.Errorf("%s: %d %q", name, code, body)
			}
		}()
	}
	waitFor(t, 30*time.Second, "a loop to wait for the turn", func() bool { return n.metric("wasmkeep_events_waiting_cpu") == 1 })
	n.expect("GET", "/actor/hostile/light/hits", "", 200, "ok 2")
	select {
	case e := <-ended:
		t.Fatalf("a loop ended before the light request was answered (%s): the test shows nothing", e)
	default:
	}
	if got := n.metric("wasmkeep_events_waiting_cpu"); got != 1 {
		t.Errorf("%v events wait for the turn after the light request, want 1 (the other loop)", got)
	}
}
