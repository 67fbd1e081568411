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
	forwarded        prometheus.Counter
	forwardFailures  *prometheus.CounterVec
	calls            prometheus.Counter
	callFailures     *prometheus.CounterVec
	takeovers        prometheus.Counter
	takeoverRestore  prometheus.Histogram
	listing          prometheus.Histogram
	listingFailures  prometheus.Counter
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
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_forwarded_requests_total", Help: "Requests and WebSocket upgrades this node forwarded to the node holding their actor, and that it answered.",
		}),
		forwardFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_forward_failures_total", Help: "Forwarded requests the holder did not answer, by reason: no_route (not live, or not reachable in a way this node uses: not sent), connect (no connection: not sent), broken (the connection failed after the request was written), timeout (written, no answer in time).",
		}, []string{"reason"}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_node_calls_total", Help: "actors.call sent to the node holding the callee, and answered by it.",
		}),
		callFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_node_call_failures_total", Help: "actors.call sent to another node that got no answer, by reason (as wasmkeep_forward_failures_total).",
		}, []string{"reason"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_takeovers_total", Help: "Actors this node took from another node that had not released them (fenced, stopped or restarted).",
		}),
		takeoverRestore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_takeover_restore_seconds", Help: "A takeover's restore: listing the actor's history and rebuilding its database from the bucket.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		listing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wasmkeep_membership_listing_seconds", Help: "A heartbeat listing: nodes/ listed and every node's lease read.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		listingFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmkeep_membership_listing_failures_total", Help: "Heartbeat listings that failed: the view keeps the last one, each peer trusted until its expiry.",
		}),
	}
}

// Register puts the cluster's collectors on the node's page.
func (m *Metrics) Register(c *Cluster) {
	m.reg.MustRegister(c.durableWrite, c.restore, c.restoreFailures, c.snapshotFailures, c.collected,
		c.collectFailures, c.bucketRequests, c.leaseWrites, c.leaseFailures, c.fences, c.forwarded, c.forwardFailures,
		c.calls, c.callFailures, c.takeovers, c.takeoverRestore, c.listing, c.listingFailures)
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

// Forwarded counts a forwarded request the holder answered.
func (c *Cluster) Forwarded() { c.forwarded.Inc() }

// ForwardFailed counts a forwarded request the holder did not answer.
func (c *Cluster) ForwardFailed(reason string) { c.forwardFailures.WithLabelValues(reason).Inc() }

// Called counts an actors.call another node answered.
func (c *Cluster) Called() { c.calls.Inc() }

// CallFailed counts an actors.call to another node that got no answer.
func (c *Cluster) CallFailed(reason string) { c.callFailures.WithLabelValues(reason).Inc() }

// TookOver counts a takeover and observes its restore.
func (c *Cluster) TookOver(restore time.Duration) {
	c.takeovers.Inc()
	c.takeoverRestore.Observe(restore.Seconds())
}

// Listed observes a heartbeat listing.
func (c *Cluster) Listed(took time.Duration, err error) {
	if err != nil {
		c.listingFailures.Inc()
		return
	}
	c.listing.Observe(took.Seconds())
}
