package main

import (
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// metric reads one series' value from the node's metrics page (-1 if absent).
func (tn *testNode) metric(series string) float64 {
	tn.t.Helper()
	rec := httptest.NewRecorder()
	tn.node.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	page, _ := io.ReadAll(rec.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(page)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// Every single-node metric moves when its event happens.
func TestMetricsMove(t *testing.T) {
	n := startNode(t, node.Options{
		Classes:   map[string]string{"probe": probe(t), "hidden": probe(t)},
		Access:    map[string]node.Access{"hidden": mustAccess(t, "internal")},
		WallClock: time.Second,
	})
	check := func(series string, want float64) {
		t.Helper()
		if got := n.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	check(`wasmkeep_ready`, 1)
	check(`wasmkeep_classes`, 2)
	check(`wasmkeep_admission_refused_total{reason="capacity"}`, 0) // on the page from the start

	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	check(`wasmkeep_events_total{class="probe",kind="init",outcome="ok"}`, 1)
	check(`wasmkeep_events_total{class="probe",kind="request",outcome="ok"}`, 1)
	check(`wasmkeep_event_duration_seconds_count{class="probe"}`, 1)
	check(`wasmkeep_wakes_total`, 1)
	check(`wasmkeep_instantiate_seconds_count`, 1)
	check(`wasmkeep_actors_resident`, 1)

	n.do("GET", "/actor/probe/a/spin", "")
	check(`wasmkeep_cpu_budget_exceeded_total`, 1)
	check(`wasmkeep_events_total{class="probe",kind="request",outcome="failed"}`, 1)
	check(`wasmkeep_hibernations_total`, 1) // the instance was discarded

	n.do("POST", "/actor/probe/a/seen?seq=1&ms=3000", "")
	check(`wasmkeep_event_cuts_total{reason="wall"}`, 1)

	n.do("GET", "/actor/hidden/x/hits", "")
	check(`wasmkeep_admission_refused_total{reason="access"}`, 1)

	n.expect("GET", "/actor/probe/b/alarm-set?in=0", "", 200, "set")
	waitFor(t, 10*time.Second, "the alarm event", func() bool {
		return n.metric(`wasmkeep_events_total{class="probe",kind="alarm",outcome="ok"}`) == 1
	})
}
