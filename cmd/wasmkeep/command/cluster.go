package command

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// clusterFlags are the cluster: settings a command takes as flags, each the
// last layer of its key when given.
type clusterFlags struct {
	bucket, nodeID, advertise string
	retentionSecs             int
}

// bind defines the flags: --bucket always, the others for serve.
func (f *clusterFlags) bind(fl *pflag.FlagSet, serve bool) {
	fl.StringVar(&f.bucket, "bucket", "", "the cluster's bucket: s3://BUCKET[/PREFIX] (AWS_* variables for the rest) or file:///DIR (cluster.bucket)")
	if !serve {
		return
	}
	fl.StringVar(&f.nodeID, "node-id", "", "this node's id in the bucket, [a-z0-9-], unique among its nodes; needed with --bucket (cluster.node_id)")
	fl.StringVar(&f.advertise, "advertise", "", "URL the other nodes reach this one at (cluster.advertise; default http:// and --listen)")
	fl.IntVar(&f.retentionSecs, "history-retention-secs", 3600, "keep actor history younger than this from garbage collection; 0 collects at once (cluster.history_retention_secs)")
}

// layers are the flags given, as configuration layers.
func (f *clusterFlags) layers(fl *pflag.FlagSet) []config.Flag {
	var out []config.Flag
	for _, c := range []struct {
		name, key string
		value     any
	}{
		{"bucket", "cluster.bucket", f.bucket},
		{"node-id", "cluster.node_id", f.nodeID},
		{"advertise", "cluster.advertise", f.advertise},
		{"history-retention-secs", "cluster.history_retention_secs", f.retentionSecs},
	} {
		if fl.Lookup(c.name) != nil && fl.Changed(c.name) {
			out = append(out, config.Flag{Name: "--" + c.name, Key: c.key, Value: c.value})
		}
	}
	return out
}

// joinCluster opens the chosen bucket, counted on the cluster's metrics,
// and joins the cluster of its nodes: the probe, the node-id start check,
// the lease. lost is called if the lease is lost later. The bucket is
// closed when joining fails; otherwise the caller closes it (nc.Bucket).
func joinCluster(ctx context.Context, cfg *config.Config, listen string, log *slog.Logger, lost func(error)) (*node.Cluster, error) {
	c := cfg.Cluster
	if c.NodeID == "" {
		return nil, errors.New("cluster.bucket (--bucket) is set but cluster.node_id (--node-id) is not: give this node an id, unique among the bucket's nodes")
	}
	ch, err := cfg.Plugin(plugin.Bucket)
	if err != nil {
		return nil, err
	}
	raw, err := openBucket(ch)
	if err != nil {
		return nil, err
	}
	cm := metrics.NewCluster()
	b := bucket.Counting(raw, cm.BucketRequest)
	advertise := c.Advertise
	if advertise == "" {
		advertise = "http://" + listen
	}
	m, err := cluster.Join(ctx, cluster.Config{
		Bucket: b, Clock: clock.Real, Settings: c.Lease(), NodeID: c.NodeID, Instance: newInstance(),
		Info:   nodelease.Info{Version: readBuild().version, Advertise: advertise},
		Logger: log, Lost: lost, LeaseWrote: cm.LeaseWrote,
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	log.Info("joined the cluster", "node_id", c.NodeID, "bucket", ch.Info.ID(), "advertise", advertise)
	return &node.Cluster{Member: m, Bucket: b, Metrics: cm, Retention: c.HistoryRetention()}, nil
}

// newInstance names this process in its lease: 16 random [a-z0-9].
func newInstance() string {
	const digits = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b)
}
