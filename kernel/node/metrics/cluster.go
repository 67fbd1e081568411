package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cluster are the collectors of a node with a bucket (the book's
// Monitoring chapter): replication, restores, garbage collection, the
// bucket's requests and the node lease. They exist before the node does,
// since the lease and the bucket are in use before it starts; the node
// registers them on its page (Metrics.Register).
type Cluster struct {
	durableWrite     prometheus.Histogram
	restore          prometheus.Histogram
	restoreFailures  prometheus.Counter
	snapshotFailures prometheus.Counter
	collected        prometheus.Counter
	collectFailures  prometheus.Counter
	bucketRequests   *prometheus.CounterVec
	leaseWrites      prometheus.Counter
	leaseFailures    prometheus.Counter
	fences           prometheus.Counter
	forwards         *prometheus.CounterVec
	forwardFailures  *prometheus.CounterVec
	failovers        prometheus.Counter
	failoverWaits    *prometheus.CounterVec
	failoverRestore  prometheus.Histogram
	restoreRead      prometheus.Histogram
	listing          prometheus.Histogram
	listingFailures  prometheus.Counter
	listingSkipped   prometheus.Counter
	alarmSweeps      *prometheus.CounterVec
	alarmSwept       *prometheus.CounterVec
	parkedWakes      prometheus.Counter
	parkedReleases   *prometheus.CounterVec
	relocations      *prometheus.CounterVec
}

// NewCluster returns the cluster's collectors.
func NewCluster() *Cluster {
	return &Cluster{
		durableWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_durable_write_seconds", Help: "A write's segment from its capture to the bucket's acknowledgement (exec-durable waits this long): the bucket's health as actors feel it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		restore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_restore_seconds", Help: "A hold's start: listing the actor's history and, unless the local database is the bucket's head, rebuilding it from the bucket.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		restoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_restore_failures_total", Help: "Restores of an actor from the bucket that did not complete: a read that failed three times, the bucket refusing, the deadline of its reads, a history that cannot be restored, or a local file error.",
		}),
		snapshotFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_snapshot_upload_failures_total", Help: "Snapshot uploads that were not acknowledged (tried again later).",
		}),
		collected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_history_collected_total", Help: "Objects of actors' history deleted from the bucket by garbage collection.",
		}),
		collectFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_history_collect_failures_total", Help: "Garbage-collection passes that failed (a bucket error); the next snapshot tries again.",
		}),
		bucketRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_bucket_requests_total", Help: "Requests this node made to the bucket, by operation (get, put, delete, list) and status (ok, not_found, precondition, error).",
		}, []string{"operation", "status"}),
		leaseWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_node_lease_writes_total", Help: "Writes of this node's lease that reached the bucket.",
		}),
		leaseFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_node_lease_failures_total", Help: "Writes of this node's lease that failed or timed out.",
		}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_node_fences_total", Help: "Fences this node wrote over a node that stopped renewing its lease.",
		}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_forwards_total", Help: "Requests (request), WebSocket upgrades (websocket) and actor calls (call) sent to the node holding the actor: placement efficiency.",
		}, []string{"kind"}),
		forwardFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_forward_failures_total", Help: "Of wasmkeep_forwards_total, those the holder did not answer, by reason: no_route (not live, or not reachable in a way this node uses: not sent), connect (no connection: not sent), broken (the connection failed after the request was written), timeout (written, no answer in time), not_held (the node an owner hint named released the actor and ran nothing: placed again from the record).",
		}, []string{"kind", "reason"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_failovers_total", Help: "Actors this node took over whose ownership record still named another process, freed because it was fenced, released or replaced by a new process.",
		}),
		failoverWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_failover_waits_total", Help: "Requests (request) and WebSocket upgrades (websocket) for an actor whose node was dead or stopping that this node kept until the actor could be taken over, instead of answering 503 at once, by how the wait ended: served (taken here and answered), forwarded (another node took it first: sent there once), owner_alive (the owner proved alive: sent to it as usual), expired (the wait ran out: 503), shutdown and lease_lost (this node began to stop, or its own lease is not valid: 503), left (the client left: never run), answered_other (asked for here and answered otherwise, or the client left during that try); over_cap: would have been kept, answered 503 at once because the node or the actor had its share kept already.",
		}, []string{"kind", "outcome"}),
		restoreRead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_restore_read_seconds", Help: "One object (a snapshot or a segment) a restore read from the bucket, from its first try to its bytes: retries and the wait for the node's read limit included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		failoverRestore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_failover_restore_seconds", Help: "A failover's restore: listing the actor's history and rebuilding its database from the bucket.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		listing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_listing_seconds", Help: "One listing of the cluster's heartbeats (nodes/ listed, every lease read), with the view and the peers' pins it refreshes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		listingFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_listing_failures_total", Help: "Heartbeat listings that failed: the view keeps the last one, each peer trusted until its expiry.",
		}),
		listingSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_listing_skipped_total", Help: "Keys under nodes/ a heartbeat listing could not read as a node lease (a folder marker, a deeper key, another format, a refused read), counted at each listing: left out, the rest of the listing used.",
		}),
		alarmSweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_alarm_sweeps_total", Help: "Passes of the alarm sweep over the app's overdue entries in the bucket's alarm index, by outcome: ok, or failed (a listing or a read of the bucket failed: the next pass starts over).",
		}, []string{"outcome"}),
		alarmSwept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_alarm_sweep_deliveries_total", Help: "Overdue alarms the sweep handed to this node's timer, by share: own (this node's shard of the live nodes) or anyone (three margins overdue). Rising while no node died: alarms whose owner did not fire them in time.",
		}, []string{"share"}),
		parkedWakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_parked_wakes_total", Help: "Wakes of a parked actor on its node (ADR 1055): each one an acquisition at a new generation.",
		}),
		parkedReleases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_parked_releases_total", Help: "Parked ownership records this node ended (ADR 1055), by reason: last_socket (the actor's last socket here closed, or the owner sweep found none open), drain (a drain pass), stop (a clean stop), not_taking (a taking pass of a node that takes no actor for a reason other than a drain, such as its secrets, or an event for it that reached this node while it took no actor: released before it went to a peer that does) and move (wasmkeep actor move, its sockets closed: a release their freed slot had not made) count the releases that landed when tried (one that did not is retried in the background with the other pending releases, and not counted); lapse counts the parked records a lapse of the node lease turned into pending releases.",
		}, []string{"reason"}),
		relocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_relocations_total", Help: "Requests and WebSocket upgrades for an actor no node held that this node, every instance slot busy, sent to a peer whose heartbeat said it had room rather than answer 503 (ADR 1054), by outcome: served (the peer answered, not 503), refused (the peer answered 503: full after all, or the actor was taken meanwhile) or failed (no answer: 503, or 504 once written).",
		}, []string{"outcome"}),
	}
}

// Why a parked record was released: wasmkeep_parked_releases_total's
// reasons.
const (
	ParkedLastSocket = "last_socket"
	ParkedDrain      = "drain"
	ParkedLapse      = "lapse"
	ParkedStop       = "stop"
	ParkedNotTaking  = "not_taking"
	ParkedMove       = "move"
)

// ParkedWake counts a wake of a parked actor.
func (c *Cluster) ParkedWake() { c.parkedWakes.Inc() }

// ParkedReleased counts n parked records ended for reason: releases that
// landed, or (ParkedLapse) records a lapse made pending releases.
func (c *Cluster) ParkedReleased(reason string, n int) {
	c.parkedReleases.WithLabelValues(reason).Add(float64(n))
}

// Register puts the cluster's collectors on the node's page, with the
// gauge of the parked records (parked counts them now).
func (m *Metrics) Register(c *Cluster, parked func() int) {
	m.reg.MustRegister(c.durableWrite, c.restore, c.restoreFailures, c.snapshotFailures, c.collected,
		c.collectFailures, c.bucketRequests, c.leaseWrites, c.leaseFailures, c.fences, c.forwards, c.forwardFailures,
		c.failovers, c.failoverWaits, c.failoverRestore, c.restoreRead, c.listing, c.listingFailures, c.listingSkipped,
		c.alarmSweeps, c.alarmSwept, c.parkedWakes, c.parkedReleases, c.relocations,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wasmkeep_parked_records", Help: "Ownership records this node keeps for actors that hibernated with sockets open here (ADR 1055).",
		}, func() float64 { return float64(parked()) }))
	for _, r := range []string{ParkedLastSocket, ParkedDrain, ParkedLapse, ParkedStop, ParkedNotTaking, ParkedMove} {
		c.parkedReleases.WithLabelValues(r)
	}
	for _, o := range []string{SweepOK, SweepFailed} {
		c.alarmSweeps.WithLabelValues(o)
	}
	for _, s := range []string{SweptOwn, SweptAnyone} {
		c.alarmSwept.WithLabelValues(s)
	}
	for _, o := range []string{RelocationServed, RelocationRefused, RelocationFailed} {
		c.relocations.WithLabelValues(o)
	}
}

// DurableWrite observes one acknowledged segment.
func (c *Cluster) DurableWrite(took time.Duration) { c.durableWrite.Observe(took.Seconds()) }

// Restore observes one hold's start, and counts it failed with an error.
func (c *Cluster) Restore(took time.Duration, err error) {
	c.restore.Observe(took.Seconds())
	if err != nil {
		c.restoreFailures.Inc()
	}
}

// SnapshotFailure counts a snapshot upload not acknowledged.
func (c *Cluster) SnapshotFailure() { c.snapshotFailures.Inc() }

// Collected counts objects a collection pass deleted.
func (c *Cluster) Collected(n int) { c.collected.Add(float64(n)) }

// CollectFailure counts a collection pass that failed.
func (c *Cluster) CollectFailure() { c.collectFailures.Inc() }

// BucketRequest counts one bucket request (a listing once, whatever its
// pages).
func (c *Cluster) BucketRequest(operation, status string) {
	c.bucketRequests.WithLabelValues(operation, status).Inc()
}

// LeaseWrote counts one write of the node's lease, failed if err is set.
func (c *Cluster) LeaseWrote(err error) {
	if err != nil {
		c.leaseFailures.Inc()
		return
	}
	c.leaseWrites.Inc()
}

// Fence counts a fence this node wrote.
func (c *Cluster) Fence() { c.fences.Inc() }

// The kinds of wasmkeep_forwards_total.
const (
	ForwardRequest   = "request"
	ForwardWebSocket = "websocket"
	ForwardCall      = "call"
)

// Forwarded counts an event of kind sent to the actor's holder, and, with
// a reason, its failure.
func (c *Cluster) Forwarded(kind, failure string) {
	c.forwards.WithLabelValues(kind).Inc()
	if failure != "" {
		c.forwardFailures.WithLabelValues(kind, failure).Inc()
	}
}

// How a relocation ended: wasmkeep_relocations_total's outcomes.
const (
	RelocationServed  = "served"
	RelocationRefused = "refused"
	RelocationFailed  = "failed"
)

// Relocated counts a request or upgrade sent to a peer with room, by how
// it ended.
func (c *Cluster) Relocated(outcome string) { c.relocations.WithLabelValues(outcome).Inc() }

// FailedOver counts a failover and observes its restore.
func (c *Cluster) FailedOver(restore time.Duration) {
	c.failovers.Inc()
	c.failoverRestore.Observe(restore.Seconds())
}

// How a failover wait ended: wasmkeep_failover_waits_total's outcomes.
const (
	WaitServed        = "served"
	WaitForwarded     = "forwarded"
	WaitOwnerAlive    = "owner_alive"
	WaitExpired       = "expired"
	WaitShutdown      = "shutdown"
	WaitLeaseLost     = "lease_lost"
	WaitLeft          = "left"
	WaitAnsweredOther = "answered_other"
	WaitOverCap       = "over_cap"
)

// FailoverWait counts a request of kind (ForwardRequest or
// ForwardWebSocket) kept through a failover, by how its wait ended.
func (c *Cluster) FailoverWait(kind, outcome string) {
	c.failoverWaits.WithLabelValues(kind, outcome).Inc()
}

// Listed observes a heartbeat listing.
func (c *Cluster) Listed(took time.Duration, err error) {
	if err != nil {
		c.listingFailures.Inc()
		return
	}
	c.listing.Observe(took.Seconds())
}

// ListingSkipped counts a key of a heartbeat listing that is not a node
// lease.
func (c *Cluster) ListingSkipped() { c.listingSkipped.Inc() }

// wasmkeep_alarm_sweeps_total's outcomes and
// wasmkeep_alarm_sweep_deliveries_total's shares.
const (
	SweepOK     = "ok"
	SweepFailed = "failed"
	SweptOwn    = "own"
	SweptAnyone = "anyone"
)

// AlarmSweep counts a pass of the alarm sweep and the alarms it handed to
// the timer, from this node's shard (own) and as anyone's.
func (c *Cluster) AlarmSweep(outcome string, own, anyone int) {
	c.alarmSweeps.WithLabelValues(outcome).Inc()
	c.alarmSwept.WithLabelValues(SweptOwn).Add(float64(own))
	c.alarmSwept.WithLabelValues(SweptAnyone).Add(float64(anyone))
}

// RestoreRead observes one object a restore read.
func (c *Cluster) RestoreRead(took time.Duration) { c.restoreRead.Observe(took.Seconds()) }
