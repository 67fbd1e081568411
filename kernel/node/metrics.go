package node

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Event kinds and outcomes, the labels of wasmkeep_events_total.
const (
	kindRequest   = "request"
	kindAlarm     = "alarm"
	kindInit      = "init"
	kindWebSocket = "websocket"
)

// Reasons of wasmkeep_admission_refused_total.
const (
	refusedAccess      = "access"
	refusedCapacity    = "capacity"
	refusedOverloaded  = "overloaded"
	refusedUnavailable = "unavailable"
)

// metrics are the book's single-node metrics (Monitoring), on a registry of
// the node's own so that several nodes in one process do not collide. Labels
// are class names, event kinds and fixed reasons, never actor names. The
// book's metrics are about actors: the stateless component's requests have
// series of their own.
type metrics struct {
	reg               *prometheus.Registry
	events            *prometheus.CounterVec
	duration          *prometheus.HistogramVec
	cuts              *prometheus.CounterVec
	cpuBudget         prometheus.Counter
	instantiate       prometheus.Histogram
	wakes             prometheus.Counter
	hibernations      prometheus.Counter
	refused           *prometheus.CounterVec
	alarmRetries      prometheus.Counter
	requestsAbandoned prometheus.Counter
	stateless         *prometheus.CounterVec
	statelessDuration prometheus.Histogram
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_events_total", Help: "Events run, by class, kind (request, alarm, websocket, init) and outcome (ok, failed).",
		}, []string{"class", "kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wasmkeep_event_duration_seconds", Help: "Time an event took, from its start in the actor to its end.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"class"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_event_cuts_total", Help: "Events the host stopped, by reason (wall: past the wall-clock limit).",
		}, []string{"reason"}),
		cpuBudget: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_cpu_budget_exceeded_total", Help: "Guest calls stopped for using their CPU budget.",
		}),
		instantiate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_instantiate_seconds", Help: "Creating an actor's instance (its _initialize included): the wake cost.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		wakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_wakes_total", Help: "Actor instances created (first request or wake).",
		}),
		hibernations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_hibernations_total", Help: "Actor instances dropped (hibernated, evicted, discarded after a failure, deleted, shut down).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_admission_refused_total", Help: "Requests and actor calls refused before their event ran, by reason.",
		}, []string{"reason"}),
		alarmRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_alarm_admission_retries_total", Help: "Alarm deliveries rescheduled because resident capacity or an actor queue was full.",
		}),
		requestsAbandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_requests_abandoned_total", Help: "Requests and calls not run because their sender had gone while they waited.",
		}),
		stateless: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_stateless_requests_total", Help: "Requests the stateless component ran, each on an instance of its own, by outcome (ok, failed).",
		}, []string{"outcome"}),
		statelessDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_stateless_request_duration_seconds", Help: "Time a stateless request took, its instance's creation included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	for _, r := range []string{refusedAccess, refusedCapacity, refusedOverloaded, refusedUnavailable} {
		m.refused.WithLabelValues(r) // every reason is on the page from the start
	}
	m.cuts.WithLabelValues("wall")
	ready := func() float64 {
		if n.stopping.Load() {
			return 0
		}
		return 1
	}
	m.reg.MustRegister(m.events, m.duration, m.cuts, m.cpuBudget, m.instantiate, m.wakes, m.hibernations,
		m.refused, m.alarmRetries, m.requestsAbandoned, m.stateless, m.statelessDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_actors_resident", Help: "Actors in memory now (registered mailboxes)."},
			func() float64 { n.mu.Lock(); defer n.mu.Unlock(); return float64(len(n.actors)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_events_queued", Help: "Events waiting in resident actors' mailboxes, not started yet."},
			func() float64 { n.mu.Lock(); defer n.mu.Unlock(); return float64(n.queued()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wasmkeep_guest_log_lines_total", Help: "Lines actors printed that reached the log."},
			func() float64 { return float64(n.GuestLogLines()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wasmkeep_guest_log_dropped_total", Help: "Lines actors printed that were dropped over the rate."},
			func() float64 { return float64(n.GuestLogDropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_websockets_open", Help: "Registered WebSockets, including pending close cleanup."},
			func() float64 { n.ws.mu.Lock(); defer n.ws.mu.Unlock(); return float64(len(n.ws.all)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_classes", Help: "Classes served."},
			func() float64 { return float64(len(n.classes)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_ready", Help: "1 when /_wasmkeep/ready answers 200."}, ready),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_not_ready", Help: "1 while the node is not ready, with the reason.", ConstLabels: prometheus.Labels{"reason": "shutting down"},
		}, func() float64 { return 1 - ready() }),
	)
	return m
}

// queued counts the events in resident actors' mailboxes; n.mu is held.
func (n *Node) queued() (sum int) {
	for _, a := range n.actors {
		sum += a.queue.len()
	}
	return sum
}

// MetricsHandler serves the node's metrics page (--metrics-listen).
func (n *Node) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{Registry: n.metrics.reg})
}

// event counts one event of class c (the stateless component's requests
// are counted apart).
func (m *metrics) event(c *class, kind string, failed bool, took time.Duration) {
	outcome := "ok"
	if failed {
		outcome = "failed"
	}
	if c.stateless {
		m.stateless.WithLabelValues(outcome).Inc()
		m.statelessDuration.Observe(took.Seconds())
		return
	}
	m.events.WithLabelValues(c.name, kind, outcome).Inc()
	if kind != kindInit {
		m.duration.WithLabelValues(c.name).Observe(took.Seconds())
	}
}

// instanceCreated counts an actor's wake. The stateless component's
// instances, one per request, are not actors waking.
func (m *metrics) instanceCreated(c *class, took time.Duration) {
	if c.stateless {
		return
	}
	m.instantiate.Observe(took.Seconds())
	m.wakes.Inc()
}

// instanceDropped counts an actor's instance dropped (not the stateless
// component's).
func (m *metrics) instanceDropped(c *class) {
	if !c.stateless {
		m.hibernations.Inc()
	}
}

// countRefusal counts a request or call that deliver refused.
func (n *Node) countRefusal(err error) {
	switch {
	case errors.Is(err, errQueueFull):
		n.metrics.refused.WithLabelValues(refusedOverloaded).Inc()
	case errors.Is(err, errCapacity):
		n.metrics.refused.WithLabelValues(refusedCapacity).Inc()
	case errors.Is(err, errStopping), notHere(err):
		n.metrics.refused.WithLabelValues(refusedUnavailable).Inc()
	}
}
