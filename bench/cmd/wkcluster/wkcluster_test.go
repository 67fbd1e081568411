//go:build linux

package main

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/internal/benchtest"
)

// TestQuickRun runs wkcluster -quick (two kills on a 2 s lease, 100
// samples, four deploys, four secrets changes, 50 alarms recovered, 20
// actors through a node with 4 slots, three probes and three rooms moved) and
// checks the CSV: every row there, each with a positive value (never how
// large) but what TLS adds, which may come out below zero in a run this
// short, and the requests failed during the deploys and the secrets
// changes, which should be none but are a measurement, not a check.
func TestQuickRun(t *testing.T) {
	bin, _ := benchtest.Build(t)
	guest := benchtest.BuildGuest(t, "cmd/wasmkeep/testdata/guests/probe")
	room := benchtest.BuildGuest(t, "cmd/wasmkeep/testdata/guests/room")
	out := filepath.Join(t.TempDir(), "results")
	var stdout strings.Builder
	err := run([]string{"-wasmkeep", bin, "-guest", guest, "-room", room, "-out", out, "-quick"}, &stdout)
	t.Log(stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(out, "*-cluster.csv"))
	if err != nil || len(files) != 1 {
		t.Fatalf("CSVs %v (%v), want one", files, err)
	}
	servers, all := benchtest.ReadCSV(t, files[0])
	if len(servers) != 1 || !strings.HasSuffix(servers[0], "/probe") {
		t.Fatalf("%s has rows for %v, want one server with the probe", files[0], servers)
	}
	values := all[servers[0]]
	metrics := []string{"takeover_p50", "takeover_p99", "takeover_min", "takeover_max", "takeover_kills",
		"deploy_serving_p50", "deploy_serving_p99", "deploy_serving_max", "deploy_count", "deploy_load_requests",
		"secrets_count", "secrets_polls",
		"alarm_recovery_late_p50", "alarm_recovery_late_p99", "alarm_recovery_all_ran", "alarm_recovery_rate_per_node", "alarm_recovery_alarms",
		"drain_idle_actors", "drain_busy_actors", "drain_seconds", "drain_load_requests",
		"relocate_requests", "relocate_503_alone", "relocate_avoided", "relocate_served_by_peers", "relocate_local_p50", "relocate_relocated_p50",
		"move_actors", "move_unavailable_p50", "move_unavailable_p99", "move_unavailable_max", "move_gap_p50", "move_gap_p99", "move_gap_max",
		"move_requests", "move_room_closed_p50", "move_room_closed_p99", "move_room_closed_max",
		"move_room_reconnect_p50", "move_room_reconnect_p99", "move_room_reconnect_max"}
	// Every node's time to serve a change, and each node's slowest, are
	// above the CSV's resolution (0.1 ms; node a's slowest was 0.05 s, 0 at
	// the 0.1 s it had): rows of a single node's p50 and p99 may round to
	// 0 (a node that read the set while the command was still returning),
	// and are only required below.
	metrics = append(metrics, "secrets_serving_p50", "secrets_serving_p99", "secrets_serving_max")
	var perNode []string
	for _, of := range []string{"_a", "_b", "_c"} {
		metrics = append(metrics, "secrets_serving"+of+"_max")
		perNode = append(perNode, "secrets_serving"+of+"_p50", "secrets_serving"+of+"_p99")
	}
	for _, mode := range []string{"tls", "plain"} {
		for _, m := range []string{"get_direct_p50_", "get_direct_p99_", "get_forwarded_p50_", "get_forwarded_p99_",
			"get_forward_added_p50_", "get_forwarded_ratio_p50_",
			"call_one_node_p50_", "call_one_node_p99_", "call_across_nodes_p50_", "call_across_nodes_p99_", "call_across_nodes_ratio_p50_"} {
			metrics = append(metrics, m+mode)
		}
	}
	for _, m := range metrics {
		if values[m] <= 0 {
			t.Errorf("%s = %v, want a positive value", m, values[m])
		}
	}
	// Measurements that may be 0: a run this short may read no record
	// (owner hints) and no lease meanwhile.
	present := []string{"get_forward_tls_added_p50", "deploy_load_failed", "secrets_polls_failed", "alarm_recovery_ran_twice",
		"forward_bucket_gets_per_request_tls", "forward_bucket_gets_per_request_plain",
		"drain_load_unavailable", "drain_load_failed", "drain_lost_writes", "relocate_503_with_peers",
		"move_non200", "move_failed", "move_lost_writes", "move_room_redials"}
	present = append(present, perNode...)
	for _, m := range present {
		if _, ok := values[m]; !ok {
			t.Errorf("%s missing", m)
		}
	}
	if len(values) != len(metrics)+len(present) {
		t.Errorf("%d metrics, want %d", len(values), len(metrics)+len(present))
	}
	for _, mode := range []string{"tls", "plain"} {
		if v := values["forward_bucket_gets_per_request_"+mode]; v >= 0.5 {
			t.Errorf("forward_bucket_gets_per_request_%s = %v: the forwarding node reads the record for most requests", mode, v)
		}
	}
	if values["takeover_kills"] != 2 || values["deploy_count"] != 4 || values["secrets_count"] != 2 {
		t.Errorf("takeover_kills = %v, deploy_count = %v, secrets_count = %v, want 2, 4 and 2",
			values["takeover_kills"], values["deploy_count"], values["secrets_count"])
	}
	// The rows count what they read back; a lost write is a bug, not a
	// measurement (the drain and move tests are what look for it).
	if values["drain_lost_writes"] != 0 || values["drain_idle_actors"] != 50 || values["drain_busy_actors"] != 10 {
		t.Errorf("drain_lost_writes = %v, drain_idle_actors = %v, drain_busy_actors = %v, want 0, 50 and 10",
			values["drain_lost_writes"], values["drain_idle_actors"], values["drain_busy_actors"])
	}
	if values["move_lost_writes"] != 0 || values["move_actors"] != 3 {
		t.Errorf("move_lost_writes = %v, move_actors = %v, want 0 and 3", values["move_lost_writes"], values["move_actors"])
	}
}

// TestSecretPoll: a poll serves the change once it reads the new value; one
// that failed, was not 200 or read neither value is a failure; one another
// node answered ends the run.
func TestSecretPoll(t *testing.T) {
	const before, want = "set value-1", "set value-2"
	for _, c := range []struct {
		name          string
		a             answer
		err           error
		served, fails bool
		moved         bool
	}{
		{name: "new value", a: answer{200, want, "a"}, served: true},
		{name: "value before", a: answer{200, before, "a"}},
		{name: "unset", a: answer{200, "unset", "a"}, fails: true},
		{name: "older value", a: answer{200, "set value-0", "a"}, fails: true},
		{name: "503", a: answer{503, "secrets unavailable", "a"}, fails: true},
		{name: "no answer", err: errors.New("connection refused"), fails: true},
		{name: "another node", a: answer{200, want, "b"}, moved: true},
	} {
		served, why, moved := secretPoll("http://node-a/env", c.a, c.err, "a", before, want)
		if served != c.served || (why != "") != c.fails || (moved != nil) != c.moved {
			t.Errorf("%s: served %v, failure %q, moved %v; want served %v, a failure %v, moved %v",
				c.name, served, why, moved, c.served, c.fails, c.moved)
		}
	}
}

// TestAwaitEach: each node's time is its own, and one node's error ends
// every node's wait.
func TestAwaitEach(t *testing.T) {
	cl := &cluster{nodes: []*node{{id: "a"}, {id: "b"}, {id: "c"}}}
	from := time.Now()
	var polls [3]atomic.Int32
	took, err := cl.awaitEach(from, "x", func(n *node) (bool, error) {
		i := n.id[0] - 'a'
		return polls[i].Add(1) > int32(i*i)*10, nil // a at once, b and c 10 and 40 polls later
	})
	if err != nil || !(took[0] < took[1] && took[1] < took[2]) {
		t.Fatalf("took %v, %v; want a, b, c in that order", took, err)
	}
	broken := errors.New("broken")
	begin := time.Now()
	_, err = cl.awaitEach(time.Now(), "x", func(n *node) (bool, error) {
		if n.id == "b" {
			return false, broken
		}
		return false, nil
	})
	if !errors.Is(err, broken) || time.Since(begin) > 30*time.Second {
		t.Fatalf("awaitEach returned %v after %v; want b's error, at once", err, time.Since(begin))
	}
}
