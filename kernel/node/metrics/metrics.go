// Package metrics holds a node's Prometheus collectors and their names: the
// book's single-node metrics (Monitoring), on a registry of the node's own
// so that several nodes in one process do not collide. Labels are class
// names, event kinds and fixed reasons, never actor names. The book's
// metrics are about actors: the stateless component's requests have series
// of their own.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Event kinds, the kind label of wasmkeep_events_total.
const (
	KindRequest   = "request"
	KindAlarm     = "alarm"
	KindInit      = "init"
	KindWebSocket = "websocket"
)

// Reasons of wasmkeep_admission_refused_total.
const (
	RefusedAccess      = "access"
	RefusedCapacity    = "capacity"
	RefusedOverloaded  = "overloaded"
	RefusedUnavailable = "unavailable"
)

// Reasons of wasmkeep_event_cuts_total.
const (
	CutWall    = "wall"     // past the event's wall-clock limit
	CutHostCPU = "host_cpu" // past the event's CPU cap, host calls included
)

// Gauges are what the page reads from the node as it is served.
type Gauges struct {
	Resident        func() float64 // actors in memory
	Queued          func() float64 // events waiting in their mailboxes
	WaitingCPU      func() float64 // events of actors heavy on CPU waiting for a turn of the cores (ADR 1057)
	GuestLogLines   func() float64
	GuestLogDropped func() float64
	WebSockets      func() float64 // registered sockets
	Classes         func() float64
	NotReady        func() string // why /_wasmkeep/ready answers 503 (one of NotReadyReasons), or "" when it answers 200
	Build           Build         // wasmkeep_build_info's labels
}

// Build names the running build: wasmkeep_build_info is 1 with these
// labels, so a dashboard can tell which nodes run what.
type Build struct {
	Version   string // the module's version, "(devel)" in a checkout
	Commit    string // the VCS revision, "" when not recorded
	GoVersion string
	Runtime   string // the engine plugin in use
	Storage   string // the storage plugin in use
}

// Metrics are a node's collectors.
type Metrics struct {
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
	ownerCloses       *prometheus.CounterVec
	requestsAbandoned prometheus.Counter
	stateless         *prometheus.CounterVec
	statelessDuration prometheus.Histogram
	indexRebuilds     prometheus.Counter
	indexUnreadable   prometheus.Counter
	deployVersion     *prometheus.GaugeVec
	deploySeq         prometheus.Gauge
	followFailures    prometheus.Counter
	deletes           *prometheus.CounterVec
	deleteFailures    *prometheus.CounterVec
}

// New returns a node's collectors, registered with g on a registry of
// their own.
func New(g Gauges) *Metrics {
	m := &Metrics{
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
		ownerCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_websocket_owner_closes_total", Help: "WebSockets closed with 1012 because this node no longer held their actor, by how it found out: event (a message on one found another node holding the actor), sweep (the owner sweep found another node holding a room that hibernated with sockets open here), lease_lapse (this node's lease ran out), drain (this node takes no actor and handed the actor over, or closed a hibernated room's sockets), move (the actor moves to another node: wasmkeep actor move).",
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
		indexRebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_alarm_index_rebuilds_total", Help: "Times the alarm index was rebuilt from every actor database, missing or damaged at start.",
		}),
		indexUnreadable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_alarm_index_unreadable_databases_total", Help: "Actor databases a rebuild of the alarm index could not read: their alarms, if any, are not scheduled.",
		}),
		deployVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wasmkeep_deploy_version_info", Help: "1 for the deployed version the node serves (\"\" for --actor classes).",
		}, []string{"version"}),
		deploySeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmkeep_deploy_seq", Help: "The seq of the deployed version the node serves (0 for --actor classes).",
		}),
		followFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_deploy_follow_failures_total", Help: "Times the node could not follow its app's current version (read, download or apply failed).",
		}),
		deletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_actor_deletes_total", Help: "Actor deletes recorded (with a bucket: the reset acknowledged), by how: self (delete-self), self_durable (delete-self-durable), operator (wasmkeep actor delete), expired (idle expiry).",
		}, []string{"how"}),
		deleteFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_actor_delete_failures_total", Help: "Actor deletes that failed to be recorded (the data stays; with a bucket the actor was given up or the request stays), by how, as wasmkeep_actor_deletes_total.",
		}, []string{"how"}),
	}
	for _, how := range []string{DeleteSelf, DeleteSelfDurable, DeleteOperator, DeleteExpired} {
		m.deletes.WithLabelValues(how)
		m.deleteFailures.WithLabelValues(how)
	}
	for _, r := range []string{RefusedAccess, RefusedCapacity, RefusedOverloaded, RefusedUnavailable} {
		m.refused.WithLabelValues(r) // every reason is on the page from the start
	}
	m.cuts.WithLabelValues(CutWall)
	ready := func() float64 {
		if g.NotReady() == "" {
			return 1
		}
		return 0
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wasmkeep_build_info", Help: "1, with the build's version, commit, Go version and the engine and storage plugins in use as labels.",
		ConstLabels: prometheus.Labels{"version": g.Build.Version, "commit": g.Build.Commit, "goversion": g.Build.GoVersion,
			"runtime": g.Build.Runtime, "storage": g.Build.Storage},
	})
	build.Set(1)
	m.reg.MustRegister(build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.events, m.duration, m.cuts, m.cpuBudget, m.instantiate, m.wakes, m.hibernations,
		m.refused, m.alarmRetries, m.ownerCloses, m.requestsAbandoned, m.stateless, m.statelessDuration, m.indexRebuilds, m.indexUnreadable,
		m.deployVersion, m.deploySeq, m.followFailures, m.deletes, m.deleteFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_actors_resident", Help: "Actors in memory now (registered mailboxes)."}, g.Resident),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_events_queued", Help: "Events waiting in resident actors' mailboxes, not started yet."}, g.Queued),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_events_waiting_cpu", Help: "Running events of actors heavy on CPU waiting for a turn of the cores."}, g.WaitingCPU),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wasmkeep_guest_log_lines_total", Help: "Lines actors printed that reached the log."}, g.GuestLogLines),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wasmkeep_guest_log_dropped_total", Help: "Lines actors printed that were dropped over the rate."}, g.GuestLogDropped),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_websockets_open", Help: "Registered WebSockets, including pending close cleanup."}, g.WebSockets),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_classes", Help: "Classes served."}, g.Classes),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmkeep_ready", Help: "1 when /_wasmkeep/ready answers 200."}, ready),
	)
	for _, reason := range NotReadyReasons {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_not_ready", Help: "1 for the reason the node is not ready now (the public answer gives none).", ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 {
			if g.NotReady() == reason {
				return 1
			}
			return 0
		}))
	}
	return m
}

// How an actor was deleted, the how label of wasmkeep_actor_deletes_total.
const (
	DeleteSelf        = "self"
	DeleteSelfDurable = "self_durable"
	DeleteOperator    = "operator"
	DeleteExpired     = "expired" // idle expiry
)

// Deleted counts a delete recorded, or one that failed to be.
func (m *Metrics) Deleted(how string, err error) {
	if err != nil {
		m.deleteFailures.WithLabelValues(how).Inc()
		return
	}
	m.deletes.WithLabelValues(how).Inc()
}

// Why a node is not ready (book, Monitoring), the first that holds.
const (
	NotReadyStopping   = "shutting down"
	NotReadyLease      = "node lease not valid"
	NotReadyPeers      = "peers not listed yet"
	NotReadyCallSecret = "cluster secret not loaded"
	NotReadyBehind     = "app version not followed"
	NotReadySecrets    = "secrets" // the app's secrets cannot be opened
	NotReadyDisk       = "disk"    // the data directory's disk is nearly full
)

// NotReadyReasons lists every reason, each a wasmkeep_not_ready series.
var NotReadyReasons = []string{NotReadyStopping, NotReadyDisk, NotReadyBehind, NotReadySecrets, NotReadyLease, NotReadyPeers, NotReadyCallSecret}

// Handler serves the metrics page (--metrics-listen).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Event counts one event of class (the stateless component's requests,
// stateless, are counted apart).
func (m *Metrics) Event(class string, stateless bool, kind string, failed bool, took time.Duration) {
	outcome := "ok"
	if failed {
		outcome = "failed"
	}
	if stateless {
		m.stateless.WithLabelValues(outcome).Inc()
		m.statelessDuration.Observe(took.Seconds())
		return
	}
	m.events.WithLabelValues(class, kind, outcome).Inc()
	if kind != KindInit {
		m.duration.WithLabelValues(class).Observe(took.Seconds())
	}
}

// InstanceCreated counts an actor's wake. The stateless component's
// instances, one per request, are not actors waking.
func (m *Metrics) InstanceCreated(stateless bool, took time.Duration) {
	if stateless {
		return
	}
	m.instantiate.Observe(took.Seconds())
	m.wakes.Inc()
}

// InstanceDropped counts an actor's instance dropped (not the stateless
// component's).
func (m *Metrics) InstanceDropped(stateless bool) {
	if !stateless {
		m.hibernations.Inc()
	}
}

// Refused counts a request or call refused before its event ran, for one
// of the Refused reasons.
func (m *Metrics) Refused(reason string) { m.refused.WithLabelValues(reason).Inc() }

// Cut counts an event the host stopped, for one of the Cut reasons.
func (m *Metrics) Cut(reason string) { m.cuts.WithLabelValues(reason).Inc() }

// CPUBudgetExceeded counts a guest call stopped for using its CPU budget.
func (m *Metrics) CPUBudgetExceeded() { m.cpuBudget.Inc() }

// Abandoned counts an event not run because its sender had gone.
func (m *Metrics) Abandoned() { m.requestsAbandoned.Inc() }

// AlarmRetried counts a due alarm rescheduled for want of room.
func (m *Metrics) AlarmRetried() { m.alarmRetries.Inc() }

// The reasons of wasmkeep_websocket_owner_closes_total.
const (
	OwnerCloseEvent = "event"
	OwnerCloseSweep = "sweep"
	OwnerCloseLapse = "lease_lapse"
	OwnerCloseDrain = "drain"
	OwnerCloseMove  = "move"
)

// OwnerClosed counts sockets closed with 1012 because their actor is no
// longer this node's.
func (m *Metrics) OwnerClosed(reason string, sockets int) {
	m.ownerCloses.WithLabelValues(reason).Add(float64(sockets))
}

// Deployed records the version the node serves now.
func (m *Metrics) Deployed(version string, seq uint64) {
	m.deployVersion.Reset()
	m.deployVersion.WithLabelValues(version).Set(1)
	m.deploySeq.Set(float64(seq))
}

// FollowFailed counts a failure to follow the app's current version.
func (m *Metrics) FollowFailed() { m.followFailures.Inc() }

// IndexRebuilt counts a rebuild of the alarm index.
func (m *Metrics) IndexRebuilt() { m.indexRebuilds.Inc() }

// IndexUnreadable counts a database a rebuild of the alarm index could
// not read.
func (m *Metrics) IndexUnreadable() { m.indexUnreadable.Inc() }
