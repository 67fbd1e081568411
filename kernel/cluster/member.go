// Package cluster is how a node takes part in the cluster of the nodes
// sharing its bucket. Its sub-packages hold each protocol as logic over the
// bucket contract and a clock (nodelease, ownership, history); this package
// puts them together for a server: the bucket probe and the node lease's
// start check before anything else, the ownership records' background pass,
// readiness, and a clean stop that releases every hold and then the lease.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// Config is what Join needs.
type Config struct {
	// Bucket is the shared root: node leases, the probe, the cluster
	// secret. The app's actor state is under App's state root in it.
	Bucket   bucket.Bucket
	App      app.Name // [app.Default] the app this node serves; its heartbeat names it
	Clock    clock.Clock
	Settings nodelease.Settings
	NodeID   string
	Instance string // random per process, [a-z0-9]
	Info     nodelease.Info
	Logger   *slog.Logger
	// BucketWait is how long Join probes a bucket that does not answer
	// before it gives up with an error (cluster.bucket_wait_secs); 0
	// probes it until it answers, the book's rule.
	BucketWait time.Duration
	// Lost is called once, on the lease's goroutine, when another writer
	// replaced this node's lease (a fence, a twin, a delete): every hold is
	// already dropped; the server stops and exits non-zero. It must not
	// block.
	Lost func(error)
	// LeaseWrote is called after each write of the node lease, with its
	// error (nil: it reached the bucket); nil for none.
	LeaseWrote func(error)
	// Fenced is called when this node wrote a fence over a peer; nil for
	// none.
	Fenced func(peer string)
	// Lapsed is called, after every hold was dropped, when no lease write
	// landed in time (the lease is not valid until one does), with how
	// many parked records the lapse ended (pending releases now); nil for
	// none. It must not block.
	Lapsed func(parked int)
	// Listed is called after each heartbeat listing with how long it took
	// and its error, after the View took a successful one; nil for none.
	Listed func(took time.Duration, err error)
	// Skipped is called for each key of a successful heartbeat listing
	// that is not a node lease (membership.Peer.Err: an unreadable object,
	// a key naming no node), left out of trust, routing and fencing; nil
	// for none. Each such key is also logged when it first appears.
	Skipped func(key string, err error)
}

// Member is this process's membership: its node lease and its holds.
type Member struct {
	Lease  *nodelease.Lease
	Owners *ownership.Owners
	View   *membership.View // the peers, from WatchPeers's listings
	// State is the app's actor state: Config.Bucket under its state root
	// (bucket.Under), where ownership, history and replication run.
	State bucket.Bucket
	// Root is the shared root (Config.Bucket): node leases and the
	// cluster's control objects (DrainKey).
	Root bucket.Bucket

	leaving atomic.Bool // a clean stop began: not ready, whatever the lease says
	cfg     Config
	cancel  context.CancelFunc // ends the ownership pass
	done    chan struct{}      // the ownership pass has ended
	// unreadable are the keys the last listing could not read as node
	// leases (WatchPeers's alone), so each is logged once while it stays.
	unreadable map[string]bool
}

// ErrNoBucket is Join's error for a bucket that did not answer for
// Config.BucketWait.
var ErrNoBucket = errors.New("the bucket did not answer")

// probeRetry bounds the wait between two probes of a bucket that did not
// answer: a node starting while its bucket is down keeps trying.
const probeRetry = 30 * time.Second

// Join probes the bucket, runs the node lease's start check and first
// write, and starts the lease's writer and the ownership records'
// background pass. It returns a *nodelease.TwinError when another process
// runs with this node id, an error wrapping bucket.ErrIgnoresConditions
// for a bucket that must not be used, and ctx's error if ctx ends first;
// a bucket that does not answer is probed again for up to cfg.BucketWait
// (its error logged in full once, so that a long one does not fill the
// log), then Join fails with ErrNoBucket.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.App == (app.Name{}) {
		cfg.App = app.Default
	}
	if err := cfg.App.Check(); err != nil {
		return nil, err
	}
	// Each probe, and each sleep, within what is left of BucketWait (a
	// probe's own retries may take minutes): the node gives up once it
	// has passed, not at the last probe whose full wait would fit.
	start := cfg.Clock.Now()
	left := func() time.Duration { return cfg.BucketWait - cfg.Clock.Now().Sub(start) }
	for wait, tries := time.Second, 1; ; wait, tries = min(2*wait, probeRetry), tries+1 {
		probeCtx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.BucketWait > 0 {
			probeCtx, cancel = clock.WithTimeout(ctx, cfg.Clock, left())
		}
		err := bucket.Probe(probeCtx, cfg.Bucket)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, bucket.ErrTransient) || ctx.Err() != nil {
			return nil, fmt.Errorf("the bucket cannot be used: %w", err)
		}
		waited := cfg.Clock.Now().Sub(start)
		last, then := cfg.BucketWait > 0 && left() <= wait, "trying again"
		if last { // no probe after this wait
			wait, then = max(0, left()), "giving up at cluster.bucket_wait_secs"
		}
		if tries == 1 {
			log.Warn("the bucket did not answer its probe; "+then, "in", wait, "err", err)
		} else {
			log.Warn("the bucket still does not answer its probe; "+then, "in", wait, "tries", tries, "waited", waited.Round(time.Second))
		}
		if err := clock.Sleep(ctx, cfg.Clock, wait); err != nil {
			return nil, err
		}
		if last {
			return nil, fmt.Errorf("%w: no answer to %d probes over %v (cluster.bucket_wait_secs); the last: %w", ErrNoBucket, tries, cfg.BucketWait.Round(time.Second), err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Member{cancel: cancel, done: make(chan struct{}),
		View:  membership.NewView(cfg.NodeID, cfg.Settings, cfg.Clock),
		State: bucket.Under(cfg.Bucket, cfg.App.StateRoot()), Root: cfg.Bucket}
	info := cfg.Info
	info.App = cfg.App.String()
	lease, err := nodelease.New(nodelease.Config{
		Bucket: cfg.Bucket, Clock: cfg.Clock, Settings: cfg.Settings,
		NodeID: cfg.NodeID, Instance: cfg.Instance, Info: info,
		Events: nodelease.Events{
			Lapsed: func() {
				parked := m.Owners.DropAll()
				log.Warn("node lease lapsed: no lease write landed in time; every actor is given up until one does")
				if cfg.Lapsed != nil {
					cfg.Lapsed(parked)
				}
			},
			Renewed: func() { log.Info("node lease renewed") },
			Lost: func(err error) {
				m.Owners.Abandon()
				m.cancel()
				if cfg.Lost != nil {
					cfg.Lost(err)
				}
			},
			Wrote: cfg.LeaseWrote,
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	m.Lease = lease
	m.Owners, err = ownership.New(ownership.Config{Bucket: m.State, Nodes: cfg.Bucket, Clock: cfg.Clock, Lease: lease, Settings: cfg.Settings,
		Floor: func(ctx context.Context, a ownership.Actor) (uint64, error) {
			return HistoryGeneration(ctx, m.State, a)
		}})
	if err != nil {
		cancel()
		return nil, err
	}
	log.Info("checking that no other process runs with this node id", "takes", cfg.Settings.Takeover())
	if err := lease.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	m.cfg = cfg
	go func() {
		defer close(m.done)
		m.Owners.Run(runCtx)
	}()
	return m, nil
}

// WatchPeers is the heartbeat listing (book ADR 0020 section 2), until
// ctx ends: every lease period it lists nodes/
// and reads each peer's object, puts them in the View, calls
// Config.Listed, shows each object to the Fencer, and fences each peer
// whose watch is complete (Config.Fenced), so a node that stopped renewing
// frees its actors ttl + grace after its last write. Each request (the
// listing, each read) is bounded by one lease attempt. The caller runs it on a goroutine of its
// own (a simulation, in a step of its own).
func (m *Member) WatchPeers(ctx context.Context) {
	cfg := m.cfg
	f := m.Lease.Fencer()
	s := cfg.Settings
	bounded := func(op func(context.Context) error) error {
		ctx, cancel := clock.WithTimeout(ctx, cfg.Clock, s.AttemptTimeout())
		defer cancel()
		return op(ctx)
	}
	for clock.Sleep(ctx, cfg.Clock, s.Period()) == nil {
		// The view is kept while the lease is not valid too: a node whose
		// lease lapsed, valid again, must find an actor's new holder
		// among its peers (a stale view would leave the actor here, to be
		// refused). Fencing waits for a valid lease (Fencer.Due).
		start := cfg.Clock.Now()
		peers, err := membership.List(ctx, cfg.Bucket, bounded)
		if err == nil {
			m.View.Update(peers)
		}
		if cfg.Listed != nil {
			cfg.Listed(cfg.Clock.Now().Sub(start), err)
		}
		if err != nil {
			continue
		}
		m.skipped(peers)
		var ids []string
		for _, p := range peers {
			if p.ID != cfg.NodeID {
				f.Observe(p.ID, p.Body)
				ids = append(ids, p.ID)
			}
		}
		for _, id := range ids {
			if !f.Due(id) {
				continue
			}
			if out, _ := f.TryFence(ctx, id); out == nodelease.FenceWritten && cfg.Fenced != nil {
				cfg.Fenced(id)
			}
		}
	}
}

// skipped counts (Config.Skipped) the keys of a listing that are not node
// leases and logs those the previous listing did not have.
func (m *Member) skipped(peers []membership.Peer) {
	was := m.unreadable
	m.unreadable = map[string]bool{}
	for _, p := range peers {
		if p.Err == nil {
			continue
		}
		key := nodelease.Prefix + p.ID
		m.unreadable[key] = true
		if !was[key] {
			m.log().Warn("skipped a key of the heartbeat listing that is not a node lease; the rest of the listing is used", "key", key, "err", p.Err)
		}
		if m.cfg.Skipped != nil {
			m.cfg.Skipped(key, p.Err)
		}
	}
}

func (m *Member) log() *slog.Logger {
	if m.cfg.Logger == nil {
		return slog.Default()
	}
	return m.cfg.Logger
}

// Ready reports whether the node may take actors: its lease is valid
// (which it is not after a lapse until every hold was dropped, nor once
// lost) and no clean stop began. It reads the lease itself, not a flag
// its events set, so it cannot fall behind the lease's state.
func (m *Member) Ready() bool { return !m.leaving.Load() && m.Lease.Valid() }

// Leave is a clean stop's end, once no event runs: every hold released,
// the pending releases (those of the stop that did not land at once)
// tried once more within one attempt timeout, those still left to
// expire, then the lease written released, so peers may take what is
// left at once.
func (m *Member) Leave(ctx context.Context) error {
	m.leaving.Store(true)
	pending := m.Owners.ReleaseAll(ctx)
	if pending > 0 {
		// A record left naming this process is free only ttl + grace after
		// the lease is written released.
		resolve, cancel := clock.WithTimeout(ctx, m.cfg.Clock, m.cfg.Settings.AttemptTimeout())
		m.Owners.Resolve(resolve)
		cancel()
		pending = m.Owners.Pending()
	}
	m.cancel()
	<-m.done
	err := m.Lease.Stop(ctx)
	if pending > 0 {
		err = errors.Join(err, fmt.Errorf("%d ownership releases did not land; their actors are free once this node's lease expires", pending))
	}
	return err
}
