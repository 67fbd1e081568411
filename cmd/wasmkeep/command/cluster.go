package command

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/peers"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
	"github.com/wasmkeep/wasmkeep/kernel/transport/plaintext"
)

// clusterFlags are the cluster: settings a command takes as flags, each the
// last layer of its key when given.
type clusterFlags struct {
	bucket, nodeID, advertise                  string
	clusterListen, clusterAdvertise, plaintext string
	retentionSecs, bucketWaitSecs              int
}

// bind defines the flags: --bucket always, the others for serve.
func (f *clusterFlags) bind(fl *pflag.FlagSet, serve bool) {
	fl.StringVar(&f.bucket, "bucket", "", "the cluster's bucket: s3://BUCKET[/PREFIX] (AWS_* variables for the rest) or file:///DIR (cluster.bucket)")
	if !serve {
		return
	}
	fl.StringVar(&f.nodeID, "node-id", "", "this node's id in the bucket, [a-z0-9-], unique among its nodes; needed with --bucket (cluster.node_id)")
	fl.StringVar(&f.advertise, "advertise", "", "URL the other nodes reach this one at (cluster.advertise; default http:// and --listen)")
	fl.StringVar(&f.clusterListen, "cluster-listen", "", "address of the cluster listener, where peers reach this node over mutual TLS, e.g. 0.0.0.0:7443; needed unless --cluster-plaintext accept (cluster.cluster_listen)")
	fl.StringVar(&f.clusterAdvertise, "cluster-advertise", "", "https://HOST:PORT the other nodes reach the cluster listener at (cluster.cluster_advertise; default https:// and the address bound)")
	fl.StringVar(&f.plaintext, "cluster-plaintext", "refuse", "refuse or accept: whether plain HTTP between nodes is used; accept reaches peers without a cluster listener at --advertise (cluster.plaintext)")
	fl.IntVar(&f.retentionSecs, "history-retention-secs", 3600, "keep actor history younger than this from garbage collection; 0 collects at once (cluster.history_retention_secs)")
	fl.IntVar(&f.bucketWaitSecs, "bucket-wait-secs", 60, "at start, exit with an error if the bucket does not answer for this long; 0 waits until it does (cluster.bucket_wait_secs)")
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
		{"bucket-wait-secs", "cluster.bucket_wait_secs", f.bucketWaitSecs},
		{"cluster-listen", "cluster.cluster_listen", f.clusterListen},
		{"cluster-advertise", "cluster.cluster_advertise", f.clusterAdvertise},
		{"cluster-plaintext", "cluster.plaintext", f.plaintext},
	} {
		if fl.Lookup(c.name) != nil && fl.Changed(c.name) {
			out = append(out, config.Flag{Name: "--" + c.name, Key: c.key, Value: c.value})
		}
	}
	return out
}

// clusterNode is what serve runs for a node with a bucket besides the
// node itself.
type clusterNode struct {
	*node.Cluster
	bucket   bucket.Bucket             // the shared root, counted (bucket.Counting): the member joined on it
	prefix   string                    // the bucket plugin's key prefix, which the app's secrets are sealed for (bucketPrefix)
	listener net.Listener              // the cluster listener, or nil (--cluster-plaintext accept without one)
	secure   transport.Transport       // its transport, or nil
	plain    transport.Transport       // plain HTTP to peers without a listener, or nil (refuse)
	node     atomic.Pointer[node.Node] // once it runs: told when the lease lapses
}

// close ends what joinCluster opened that the node does not close.
func (c *clusterNode) close() {
	c.Peers.Close()
	c.closeOpened()
}

// joinCluster opens the chosen bucket, counted on the cluster's metrics,
// and the cluster listener, and joins the cluster of the bucket's nodes:
// the probe, the node-id start check, the lease (saying whether the node
// reads the app's secrets), the cluster secret. lost
// is called if the lease is lost later; listenURL, the public listener's
// URL, is what peers are given without --advertise. Everything is closed when joining
// fails; otherwise the caller closes it (clusterNode.close).
func joinCluster(ctx context.Context, cfg *config.Config, served app.Name, listenURL string, readsSecrets bool, log *slog.Logger, lost func(error)) (_ *clusterNode, err error) {
	c := cfg.Cluster
	if c.NodeID == "" {
		return nil, errors.New("cluster.bucket (--bucket) is set but cluster.node_id (--node-id) is not: give this node an id, unique among the bucket's nodes")
	}
	accept := c.Plaintext == "accept"
	if c.ClusterListen == "" && !accept {
		return nil, errors.New("a node with a bucket needs a cluster listener, where its peers reach it over mutual TLS: give --cluster-listen (and --cluster-advertise), or --cluster-plaintext accept for plain HTTP between nodes on a private network")
	}
	cn := &clusterNode{Cluster: &node.Cluster{Metrics: metrics.NewCluster(), PlainCalls: accept, Retention: c.HistoryRetention()}}
	defer func() {
		if err != nil {
			cn.closeOpened()
		}
	}()
	info := nodelease.Info{Version: readBuild().version, Advertise: cmp.Or(c.Advertise, listenURL), Secrets: readsSecrets,
		Capabilities: []string{nodelease.CapabilityTake, nodelease.CapabilityNotHeld}}
	if c.ClusterListen != "" {
		if cn.secure, cn.listener, info.ClusterAddr, err = clusterListener(ctx, cfg); err != nil {
			return nil, err
		}
		info.Pins = []string{cn.secure.Pin()}
	}
	if accept {
		cn.plain = plaintext.New()
		if publicURL(info.Advertise) {
			log.Warn("--cluster-plaintext accept with a public --advertise: calls between nodes travel unencrypted and their answers unsigned; keep such nodes on a private network, or give every node a cluster listener", "advertise", info.Advertise)
		}
	}
	ch, err := cfg.Plugin(plugin.Bucket)
	if err != nil {
		return nil, err
	}
	raw, err := openBucket(ch)
	if err != nil {
		return nil, err
	}
	cm := cn.Metrics
	cn.bucket = bucket.Counting(raw, cm.BucketRequest)
	cn.prefix = bucketPrefix(ch)
	var network *peers.Network // set before the listing starts
	beats := peers.NewHeartbeats()
	m, err := cluster.Join(ctx, cluster.Config{
		Bucket: cn.bucket, App: served, Clock: clock.Real, Settings: c.Lease(), NodeID: c.NodeID, Instance: newInstance(),
		Info: info, Logger: log, Lost: lost, BucketWait: time.Duration(c.BucketWaitSecs) * time.Second,
		LeaseWrote: func(err error) {
			cm.LeaseWrote(err)
			beats.Wrote(err)
		},
		Fenced: func(peer string) {
			cm.Fence()
			log.Warn("fenced a node that stopped renewing its lease: its actors are free", "peer", peer)
		},
		Lapsed: func(parked int) {
			if n := cn.node.Load(); n != nil {
				n.LeaseLapsed(parked)
			}
		},
		Listed: func(took time.Duration, err error) {
			cm.Listed(took, err)
			network.Refresh()
		},
		Skipped: func(string, error) { cm.ListingSkipped() },
	})
	if err != nil {
		return nil, err
	}
	cn.Member = m
	network = peers.New(peers.Config{Self: c.NodeID, App: served.String(), View: m.View, Secure: cn.secure, Plain: cn.plain,
		Clock: clock.Real, Logger: log, AnswerTimeout: cfg.Node.WallClock, Heartbeats: beats, Period: c.Lease().Period()})
	cn.Peers = network
	cn.Signer, cn.Verifier = callSecret(ctx, cn.bucket, c.NodeID, log)
	log.Info("joined the cluster", "app", served.String(), "bucket", ch.Info.ID(), "advertise", info.Advertise,
		"cluster_advertise", info.ClusterAddr, "plaintext", cmp.Or(c.Plaintext, "refuse"))
	return cn, nil
}

// closeOpened closes the listener, the transports and the bucket, those
// that are open.
func (c *clusterNode) closeOpened() {
	if c.listener != nil {
		c.listener.Close()
	}
	for _, t := range []transport.Transport{c.secure, c.plain} {
		if t != nil {
			t.Close()
		}
	}
	if c.bucket != nil {
		c.bucket.Close()
	}
}

// publicURL reports whether raw names a host by a public IP address (a
// name is not resolved: only an address is judged).
func publicURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(u.Hostname())
	return err == nil && !(a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified())
}

// clusterListener builds the chosen transport (transport.use) and listens
// on cluster.cluster_listen; the URL peers reach it at is
// cluster.cluster_advertise, or https:// and the address bound.
func clusterListener(ctx context.Context, cfg *config.Config) (transport.Transport, net.Listener, string, error) {
	c := cfg.Cluster
	ch, err := cfg.Plugin(plugin.Transport)
	if err != nil {
		return nil, nil, "", err
	}
	v, err := ch.New()
	if err != nil {
		return nil, nil, "", err
	}
	t, ok := v.(transport.Transport)
	if !ok {
		return nil, nil, "", errors.New("plugin " + ch.Info.ID() + " does not implement " + transport.API)
	}
	ln, err := t.Listen(ctx, c.ClusterListen)
	if err != nil {
		t.Close()
		return nil, nil, "", fmt.Errorf("cluster listener (--cluster-listen %s): %w", c.ClusterListen, err)
	}
	advertise := c.ClusterAdvertise
	if advertise == "" {
		ap, perr := netip.ParseAddrPort(ln.Addr().String())
		if perr != nil || ap.Addr().IsUnspecified() {
			ln.Close()
			t.Close()
			return nil, nil, "", fmt.Errorf("--cluster-listen %s binds every address: give --cluster-advertise https://HOST:PORT, the address peers reach it at", c.ClusterListen)
		}
		advertise = "https://" + ln.Addr().String()
	}
	return t, ln, advertise, nil
}

// secretTries bounds how long a start waits for the cluster secret.
const secretTries = 5

// callSecret reads the cluster secret (created by the first node) and
// returns the signer and verifier of calls between nodes; nil, nil, with
// an error logged, when it cannot be used: calls between nodes then fail
// rather than go unsigned.
func callSecret(ctx context.Context, b bucket.Bucket, self string, log *slog.Logger) (*callsign.Signer, *callsign.Verifier) {
	var err error
	for try, wait := 0, time.Second; try < secretTries; try, wait = try+1, 2*wait {
		var s callsign.Secret
		if s, err = callsign.LoadSecret(ctx, b); err == nil {
			return callsign.NewSigner(s, clock.Real), callsign.NewVerifier(s, self, clock.Real, 0)
		}
		if errors.Is(err, callsign.ErrMalformedSecret) || clock.Sleep(ctx, clock.Real, wait) != nil {
			break
		}
	}
	log.Error("calls between nodes are off: the cluster secret cannot be used", "key", callsign.SecretKey, "err", err)
	return nil, nil
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

// boundURL is the default --advertise: http:// and the --listen address
// with the port the listener bound (port 0 picks one).
func boundURL(listen string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(listen)
	_, port, perr := net.SplitHostPort(bound.String())
	if err != nil || perr != nil {
		return "http://" + listen
	}
	return "http://" + net.JoinHostPort(host, port)
}
