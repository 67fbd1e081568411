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
// downloaded and checked. In its data directory, not the cache: the
// follower prunes what its version does not use, which would take the
// modules of another node sharing the machine's cache (ADR 1058).
func modulesDir(dataDir string) string { return filepath.Join(dataDir, "deploys") }

// firstVersion loads the app's current version before the node starts, so
// nothing runs unchecked: deployed is false when the app has none. A
// version that cannot be loaded (the bucket down, an altered object) is
// tried again, with a growing wait, until ctx ends: the node does not
// start serving an app it cannot read, nor one deleted (its tombstone).
func firstVersion(ctx context.Context, c *clusterNode, a app.Name, dir string, log *slog.Logger) (l deploys.Loaded, deployed bool, err error) {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		l, err = loadOnce(ctx, c, a, dir)
		switch {
		case err == nil:
			return l, true, nil
		case errors.Is(err, deploys.ErrNothingDeployed):
			return l, false, nil
		case errors.Is(err, deploys.ErrAppDeleted): // the node refuses to start on it
			return l, false, err
		}
		log.Warn("cannot load the app's current version; trying again", "app", a.String(), "in", wait, "err", err)
		if err := clock.Sleep(ctx, clock.Real, wait); err != nil {
			return l, false, err
		}
	}
}

// ownClasses are the classes, rules and front a node's own flags give.
type ownClasses struct {
	actors    map[string]string
	access    map[string]access.Access
	expire    map[string]time.Duration
	stateless string
}

// serve sets the node's options to serve them.
func (o ownClasses) serve(opts *node.Options) {
	opts.Classes, opts.Access, opts.Stateless, opts.ExpireAfterIdle = o.actors, o.access, o.stateless, o.expire
}

// refuse refuses them on a node of an app that deployed: the version is
// their only source, so no node serves a class open that the version
// restricts, or code no rollback reaches.
func (o ownClasses) refuse(l deploys.Loaded) error {
	var given []string
	if len(o.actors) > 0 {
		given = append(given, "--actor (node.actors)")
	}
	if len(o.access) > 0 {
		given = append(given, "--access (node.access)")
	}
	if len(o.expire) > 0 {
		given = append(given, "--expire-after-idle")
	}
	if o.stateless != "" {
		given = append(given, "the stateless component "+o.stateless)
	}
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("app %s is deployed (version %s, seq %d): its classes, access rules and front come from the bucket; remove %s from this node's command line, and change them with wasmkeep deploy --app %s",
		l.App, l.Version, l.Seq, strings.Join(given, ", "), l.App)
}

// followApp sets a node with a bucket to serve its app (explicit: named by
// --app, rather than default/default) and returns the follower that keeps
// it on the app's current version, and whether the app has deployed. An
// app that has is served from its current version; one that has not, from
// the node's own classes until its first deploy, whose rules then replace
// the node's (logged for each class they open).
func followApp(ctx context.Context, c *clusterNode, a app.Name, explicit bool, opts *node.Options, own ownClasses, period time.Duration, log *slog.Logger) (*follower, bool, error) {
	dir := modulesDir(opts.DataDir)
	first, deployed, err := firstVersion(ctx, c, a, dir, log)
	if err != nil {
		return nil, false, err
	}
	var from deploys.Current
	if deployed {
		if err := own.refuse(first); err != nil {
			return nil, false, err
		}
		startFrom(opts, nodeVersion(first))
		from = deploys.Current{Version: first.Version, Seq: first.Seq}
	} else {
		own.serve(opts)
		if explicit {
			log.Warn("the app has no version deployed: the node serves the classes of its own flags, if any, until wasmkeep deploy gives it one", "app", a.String(), "classes", len(own.actors))
		}
	}
	f := newFollower(c, a, from, dir, period, own.access, log)
	opts.Behind = func(uint64) { f.Wake() }
	return f, deployed, nil
}

// loadOnce is one attempt of firstVersion, bounded as the follower's
// updates are: a bucket read that never answers is tried again.
func loadOnce(ctx context.Context, c *clusterNode, a app.Name, dir string) (deploys.Loaded, error) {
	ctx, cancel := clock.WithTimeout(ctx, clock.Real, deploys.UpdateTimeout)
	defer cancel()
	return deploys.Load(ctx, c.bucket, a, dir)
}

// nodeVersion is l as the node applies it.
func nodeVersion(l deploys.Loaded) node.Version {
	v := node.Version{ID: l.Version, Seq: l.Seq, Front: l.Front, Classes: map[string]node.ClassSpec{}}
	for name, c := range l.Classes {
		v.Classes[name] = node.ClassSpec{Module: c.Module, Access: c.Access, Config: c.Config, Requires: c.Requires, Expire: c.Expire}
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
	opts.ExpireAfterIdle = map[string]time.Duration{}
	for name, c := range v.Classes {
		opts.Classes[name], opts.Access[name] = c.Module, c.Access
		opts.Config[name], opts.Requires[name] = c.Config, c.Requires
		if c.Expire > 0 {
			opts.ExpireAfterIdle[name] = c.Expire
		}
	}
}

// follower reports what the app's follower did: the node's readiness,
// the heartbeat's serving and behind lines, the log.
type follower struct {
	*deploys.Follower
	node  *node.Node
	lease *nodelease.Lease

	// replaced are the node's own access rules, until the app's first
	// version replaces them.
	replaced map[string]access.Access
	log      *slog.Logger

	mu       sync.Mutex
	applied  deploys.Current
	since    time.Time // when applied became the version served
	failures int
	deleted  chan struct{} // closed once the app's tombstone is found
}

// appDeleted is closed once the follower found the app's tombstone
// (wasmkeep app delete): serve then stops. Nil for no follower.
func (f *follower) appDeleted() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.deleted
}

// newFollower follows a for n from the version it serves (first, zero
// for none), every period; replaced are the node's own access rules, which
// the app's first version replaces.
func newFollower(c *clusterNode, a app.Name, first deploys.Current, dir string, period time.Duration, replaced map[string]access.Access, log *slog.Logger) *follower {
	f := &follower{lease: c.Member.Lease, replaced: replaced, log: log, applied: first, since: time.Now(), deleted: make(chan struct{})}
	f.Follower = deploys.NewFollower(deploys.FollowerConfig{
		Bucket: c.bucket, App: a, Dir: dir, Period: period, Applied: first,
		Apply: func(ctx context.Context, l deploys.Loaded) error {
			if err := f.node.Apply(ctx, nodeVersion(l)); err != nil {
				return err
			}
			f.warnReopened(l)
			return nil
		},
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
	if s.Deleted {
		select {
		case <-f.deleted:
		default:
			close(f.deleted)
		}
		return
	}
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
	case s.Unread >= unreadBehind:
		// Still ready (every node shares a bucket outage), but a node
		// that reads nodes/ and not apps/ would serve stale rules unseen.
		if s.Unread == unreadBehind {
			f.log.Warn("cannot read the app's current version: the node serves the one it has", "reads", s.Unread, "err", s.Err)
		}
		behind = fmt.Sprintf("cannot read the app's current version (%d reads in a row): %v", s.Unread, s.Err)
	}
	f.failures = s.Failures
	f.heartbeat(behind)
}

// unreadBehind is how many failed reads of current in a row (10 heartbeat
// periods, 30 s at the defaults) make the heartbeat say the node is behind.
const unreadBehind = 10

// heartbeat puts what the node serves and why it is behind into its next
// lease write; the caller holds mu, or has not started the follower.
func (f *follower) heartbeat(behind string) {
	serving := ""
	if f.applied.Version != "" {
		serving = nodelease.Serving{Version: f.applied.Version, Seq: f.applied.Seq, Since: f.since}.String()
	}
	f.lease.SetServing(serving, behind)
}

// warnReopened logs, once the app's first version replaced the node's own
// rules (--access), each class the version leaves more open than they did:
// the version is the rule from now on.
func (f *follower) warnReopened(l deploys.Loaded) {
	for class, rule := range f.replaced {
		if now := l.Classes[class].Access; now.String() != rule.String() {
			f.log.Warn("the app's deployed rules replace this node's --access: remove the flag", "class", class, "flag", rule.String(), "deployed", now.String())
		}
	}
	f.replaced = nil
}
