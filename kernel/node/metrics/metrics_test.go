package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func page(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return string(b)
}

// Every refusal reason is on the page from the start; an actor's event is
// counted by class, the stateless component's apart; readiness reads the
// node.
func TestPage(t *testing.T) {
	ready := true
	one := func() float64 { return 1 }
	m := New(Gauges{Resident: one, Queued: one, WaitingCPU: one, GuestLogLines: one, GuestLogDropped: one, WebSockets: one, Classes: one, NotReady: func() string {
		if ready {
			return ""
		}
		return NotReadyStopping
	}})
	m.Event("chat", false, KindRequest, false, time.Millisecond)
	m.Event("", true, KindRequest, true, time.Millisecond)
	m.Event("chat", false, KindInit, false, 0)
	got := page(t, m)
	for _, want := range []string{
		`wasmkeep_admission_refused_total{reason="access"} 0`,
		`wasmkeep_admission_refused_total{reason="unavailable"} 0`,
		`wasmkeep_events_total{class="chat",kind="request",outcome="ok"} 1`,
		`wasmkeep_events_total{class="chat",kind="init",outcome="ok"} 1`,
		`wasmkeep_event_duration_seconds_count{class="chat"} 1`, // init is not timed
		`wasmkeep_stateless_requests_total{outcome="failed"} 1`,
		`wasmkeep_alarm_index_rebuilds_total 0`,
		`wasmkeep_events_queued 1`,
		`wasmkeep_events_waiting_cpu 1`,
		`wasmkeep_ready 1`,
		`wasmkeep_not_ready{reason="shutting down"} 0`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the page has no %s", want)
		}
	}
	if strings.Contains(got, `class=""`) {
		t.Error("the stateless component's request was counted as an actor's")
	}
	ready = false
	if got := page(t, m); !strings.Contains(got, "wasmkeep_ready 0\n") || !strings.Contains(got, `wasmkeep_not_ready{reason="shutting down"} 1`) {
		t.Error("a node not ready reads ready")
	}
}
