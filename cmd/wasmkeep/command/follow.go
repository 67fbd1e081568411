package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// serve --app follows the app's versions in the bucket (ADR 1045): it
// starts from the version current names, and a follower applies each new
// one to the node whole. The node's own flags for classes, rules and the
// front apply only to an app that never deployed.

// modulesDir is where a node keeps the modules of the version it serves,
// downloaded and checked: they can be fetched again, like the cache.
func modulesDir(cacheDir string) string { return filepath.Join(cacheDir, "deploys") }

// firstVersion loads the app's current version before the node starts, so
// nothing runs unchecked: deployed is false when the app has none. A
// version that cannot be loaded (the bucket down, an altered object) is
// tried again, with a growing wait, until ctx ends: the node does not
// start serving an app it cannot read.
func firstVersion(ctx context.Context, c *clusterNode, a app.Name, dir string, log *slog.Logger) (l deploys.Loaded, deployed bool, err error) {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		l, err = deploys.Load(ctx, c.bucket, a, dir)
		switch {
		case err == nil:
			return l, true, nil
		case errors.Is(err, deploys.ErrNothingDeployed):
			return l, false, nil
		}
		log.Warn("cannot load the app's current version; trying again", "app", a.String(), "in", wait, "err", err)
		if err := clock.Sleep(ctx, clock.Real, wait); err != nil {
			return l, false, err
		}
	}
}

// refuseNodeClasses refuses classes, rules or a front given to the node of
// an app that deployed: the version is their only source, so no node
// serves a class open that the version restricts, or code no rollback
// reaches.
func refuseNodeClasses(l deploys.Loaded, actors, accessRules bool, stateless string) error {
	var given []string
	if actors {
		given = append(given, "--actor (node.actors)")
	}
	if accessRules {
		given = append(given, "--access (node.access)")
	}
	if stateless != "" {
		given = append(given, "the stateless component "+stateless)
	}
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("app %s is deployed (version %s, seq %d): its classes, access rules and front come from the bucket; remove %s from this node's command line, and change them with wasmkeep deploy --app %s",
		l.App, l.Version, l.Seq, strings.Join(given, ", "), l.App)
}

// nodeVersion is l as the node applies it.
func nodeVersion(l deploys.Loaded) node.Version {
	v := node.Version{ID: l.Version, Seq: l.Seq, Front: l.Front, Classes: map[string]node.ClassSpec{}}
	for name, c := range l.Classes {
		v.Classes[name] = node.ClassSpec{Module: c.Module, Access: c.Access, Config: c.Config, Requires: c.Requires}
	}
	return v
}

// startFrom sets the node's options to serve v from its start.
func startFrom(opts *node.Options, v node.Version) {
	opts.VersionID, opts.Seq, opts.Stateless = v.ID, v.Seq, v.Front
	opts.Classes = map[string]string{}
	opts.Access = map[string]access.Access{}
	opts.Config = map[string]map[string]string{}
	opts.Requires = map[string][]string{}
	for name, c := range v.Classes {
		opts.Classes[name], opts.Access[name] = c.Module, c.Access
		opts.Config[name], opts.Requires[name] = c.Config, c.Requires
	}
}

// follower reports what the app's follower did: the node's readiness,
// the heartbeat's serving and behind lines, the log.
type follower struct {
	*deploys.Follower
	node  *node.Node
	lease *nodelease.Lease

	mu       sync.Mutex
	applied  deploys.Current
	since    time.Time // when applied became the version served
	failures int
}

// newFollower follows a for n from the version it serves (first, zero
// for none), every period.
func newFollower(c *clusterNode, a app.Name, first deploys.Current, dir string, period time.Duration) *follower {
	f := &follower{lease: c.Member.Lease, applied: first, since: time.Now()}
	f.Follower = deploys.NewFollower(deploys.FollowerConfig{
		Bucket: c.bucket, App: a, Dir: dir, Period: period, Applied: first,
		Apply:   func(ctx context.Context, l deploys.Loaded) error { return f.node.Apply(ctx, nodeVersion(l)) },
		OnState: f.report,
	})
	f.heartbeat("")
	return f
}

// run follows until ctx ends; n is the node it applies versions to.
func (f *follower) run(ctx context.Context, n *node.Node) {
	f.node = n
	f.Run(ctx)
}

// report is told the follower's state after each read of current. Only a
// version that could not be applied puts the node behind (not ready): a
// read of current that failed is a bucket every node shares.
func (f *follower) report(s deploys.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Applied != f.applied {
		f.applied, f.since = s.Applied, time.Now()
	}
	behind := ""
	switch {
	case s.Failures > f.failures: // the node logs it, once per reason
		f.node.SetBehind(s.Err)
		behind = s.Err.Error()
	case s.Failures == 0 && f.failures > 0:
		f.node.SetBehind(nil)
	case s.Failures > 0:
		behind = s.Err.Error()
	}
	f.failures = s.Failures
	f.heartbeat(behind)
}

// heartbeat puts what the node serves and why it is behind into its next
// lease write; the caller holds mu, or has not started the follower.
func (f *follower) heartbeat(behind string) {
	serving := ""
	if f.applied.Version != "" {
		serving = nodelease.Serving{Version: f.applied.Version, Seq: f.applied.Seq, Since: f.since}.String()
	}
	f.lease.SetServing(serving, behind)
}
