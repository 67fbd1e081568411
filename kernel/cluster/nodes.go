package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
)

// NodeState is a node as `wasmkeep cluster status` shows it.
type NodeState string

const (
	NodeLive       NodeState = "live"       // a live lease written within the horizon
	NodeStale      NodeState = "stale"      // a live lease not written within the horizon
	NodeFenced     NodeState = "fenced"     // a peer or an operator fenced it
	NodeReleased   NodeState = "released"   // it stopped cleanly
	NodeUnreadable NodeState = "unreadable" // nodes/<id> is not a node lease (format 3)
)

// NodeStatus is one nodes/<id> as cluster status shows it.
type NodeStatus struct {
	membership.Peer
	State NodeState
	// Age is how long before now its lease's written_at is, on the clock
	// now came from; negative when it is dated ahead of that clock.
	Age time.Duration
	// Serving is the deployed version it says it runs (Info.Serving), the
	// zero Serving for none or an unreadable line (warned about).
	Serving nodelease.Serving
}

// Run is what the node does for its app: draining, drained or stuck
// while it takes no actor (Info.Taking, ADR 1051), with its reasons when
// they are more than an operator's drain ("drained(secrets)", one word
// for the table's column); else
// "behind" when it says it cannot apply the app's current version
// (Info.Behind), else "serving".
func (n NodeStatus) Run() string {
	if t := n.Object.Info.Taking; t != nodelease.Takes {
		if why := n.Object.Info.NotTaking; len(why) > 0 && !slices.Equal(why, []string{nodelease.ReasonDrain}) {
			return t.String() + "(" + strings.Join(why, ",") + ")"
		}
		return t.String()
	}
	if n.Object.Info.Behind != "" {
		return "behind"
	}
	return "serving"
}

// MixedServingAfter is how long after a version was deployed (its current
// written) a live node of its app may still serve an older one before
// status warns: nodes follow current within a few heartbeats.
const MixedServingAfter = time.Minute

// Ahead is how far the lease is dated ahead of the status's clock (0 if
// it is not).
func (n NodeStatus) Ahead() time.Duration { return max(0, -n.Age) }

// Status is the cluster as its node leases say, judged at one moment.
type Status struct {
	At    time.Time    // when it was judged
	Nodes []NodeStatus // by node id
	Live  int          // how many are NodeLive
	// Plain and Listener are the live nodes without and with a cluster
	// address (ADR 0011), by id.
	Plain, Listener []string
	// Versions are the versions live nodes run, sorted, "" for a node
	// that names none.
	Versions []string
	// Apps are the apps with a current (apps/<t>/<a>/current), by app.
	Apps     []deploys.Deployed
	Warnings []string
	// Forgotten are the ids `cluster forget` retired (ADR 1041), left out
	// of Nodes.
	Forgotten []string
}

// ReadStatus lists nodes/ and judges each node by the rule the nodes use
// (membership.Peer.Live with s) at clk's time once the listing is read,
// with the book's warnings: no live node; live nodes mixing plain (no
// cluster address) and the cluster listener; live nodes on different
// versions; a live node that is stuck (ADR 1051); a live node serving a version older than its app's current
// MixedServingAfter after that was deployed, or serving one of an app
// with no current; a live node behind its app; a lease dated ahead of
// that time by more than max_skew; an object that is not a node lease; a
// current that cannot be read. A forgotten lease is left out of Nodes
// (Status.Forgotten). It reads the bucket alone: nodes/, and apps/ for
// Status.Apps.
func ReadStatus(ctx context.Context, b bucket.Bucket, s nodelease.Settings, clk clock.Clock) (Status, error) {
	peers, err := membership.List(ctx, b, nil)
	if err != nil {
		return Status{}, fmt.Errorf("listing %s: %w", nodelease.Prefix, err)
	}
	apps, err := deploys.ListDeployed(ctx, b)
	if err != nil {
		return Status{}, fmt.Errorf("listing %s: %w", app.DeployPrefix, err)
	}
	now := clk.Now()
	st := Status{At: now, Apps: apps}
	versions := map[string][]string{}
	var serving []NodeStatus // live nodes serving a deployed version
	for _, p := range peers {
		if p.Err == nil && p.Object.State == nodelease.Forgotten {
			st.Forgotten = append(st.Forgotten, p.ID)
			continue
		}
		n := NodeStatus{Peer: p, State: NodeUnreadable}
		if p.Err == nil {
			n.Age = now.Sub(p.Object.WrittenAt)
			var err error
			if n.Serving, err = nodelease.ParseServing(p.Object.Info.Serving); err != nil {
				st.Warnings = append(st.Warnings, fmt.Sprintf("nodes/%s: %v", p.ID, err))
			}
			switch {
			case p.Live(now, s):
				n.State = NodeLive
			case p.Object.State == nodelease.Live:
				n.State = NodeStale
			case p.Object.State == nodelease.Fenced:
				n.State = NodeFenced
			default:
				n.State = NodeReleased
			}
		}
		st.Nodes = append(st.Nodes, n)
		if n.State == NodeLive {
			st.Live++
			if p.Object.Info.ClusterAddr == "" {
				st.Plain = append(st.Plain, p.ID)
			} else {
				st.Listener = append(st.Listener, p.ID)
			}
			versions[p.Object.Info.Version] = append(versions[p.Object.Info.Version], p.ID)
			if n.Serving.Version != "" {
				serving = append(serving, n)
			}
			if p.Object.Info.Taking == nodelease.Stuck {
				st.Warnings = append(st.Warnings, fmt.Sprintf("node %s is stuck: it takes no actor, but holds some (or has WebSockets open) and no live node of app %s takes them; it keeps serving them: start another node of the app, or undrain one", p.ID, cmp.Or(p.Object.Info.App, "(none)")))
			}
			if slices.Contains(p.Object.Info.NotTaking, nodelease.ReasonSecrets) {
				st.Warnings = append(st.Warnings, fmt.Sprintf("node %s cannot open app %s's secrets: it takes no actor and hands over those it holds; its log says why (a key it lacks, a set altered or sealed for another app)", p.ID, cmp.Or(p.Object.Info.App, "(none)")))
			}
			if why := p.Object.Info.Behind; why != "" {
				st.Warnings = append(st.Warnings, fmt.Sprintf("node %s is behind app %s: %s", p.ID, cmp.Or(p.Object.Info.App, "(none)"), why))
			}
		}
		if a := n.Ahead(); p.Err == nil && a > s.MaxSkew {
			st.Warnings = append(st.Warnings, aheadWarning(n, s))
		}
		if p.Err != nil {
			st.Warnings = append(st.Warnings, fmt.Sprintf("nodes/%s is not a node lease: %v", p.ID, p.Err))
		}
	}
	if st.Live == 0 {
		st.Warnings = append([]string{"no live node"}, st.Warnings...)
	}
	if len(st.Plain) > 0 && len(st.Listener) > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf("mixed plain and TLS nodes: %s still plain while %s use the cluster listener; give every node a cluster listener, then drop --cluster-plaintext accept (ADR 0011)",
			strings.Join(st.Plain, ", "), strings.Join(st.Listener, ", ")))
	}
	st.Warnings = append(st.Warnings, servingWarnings(apps, serving, now)...)
	for v := range versions {
		st.Versions = append(st.Versions, v)
	}
	sort.Strings(st.Versions)
	if len(st.Versions) > 1 {
		var vs []string
		for _, v := range st.Versions {
			vs = append(vs, fmt.Sprintf("%s (%s)", cmp.Or(v, "(none)"), strings.Join(versions[v], ", ")))
		}
		st.Warnings = append(st.Warnings, "live nodes run different WasmKeep versions: "+strings.Join(vs, ", ")+"; upgrade every node together (book: Upgrading WasmKeep)")
	}
	return st, nil
}

// servingWarnings are the warnings about apps' currents: one that cannot
// be read; a node serving a version older (by seq) than its app's current
// MixedServingAfter after current was written; a node serving a version
// of an app with no current (deleted by hand).
func servingWarnings(apps []deploys.Deployed, serving []NodeStatus, now time.Time) []string {
	var out []string
	current := map[string]deploys.Deployed{}
	for _, d := range apps {
		current[d.App.String()] = d
		if d.Err != nil {
			out = append(out, fmt.Sprintf("app %s: %v", d.App, d.Err))
		}
	}
	for _, n := range serving {
		a := n.Object.Info.App
		d, ok := current[a]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("node %s serves version %s (seq %d) of app %s, but %s%s/current does not exist (deleted by hand?): nodes keep what they serve, new ones have nothing to load; deploy the app again",
				n.ID, n.Serving.Version, n.Serving.Seq, cmp.Or(a, "(none)"), app.DeployPrefix, a))
		case d.Err == nil && n.Serving.Seq < d.Current.Seq && now.Sub(d.At) > MixedServingAfter:
			out = append(out, fmt.Sprintf("node %s of app %s serves %s (seq %d), but %s (seq %d) was deployed %v ago; a node that cannot follow says why (STATE behind)",
				n.ID, a, n.Serving.Version, n.Serving.Seq, d.Current.Version, d.Current.Seq, now.Sub(d.At).Round(time.Second)))
		}
	}
	return out
}

func aheadWarning(n NodeStatus, s nodelease.Settings) string {
	what := fmt.Sprintf("nodes/%s (%s) is dated %v ahead of this clock, more than max_skew %v: ", n.ID, n.State, n.Ahead().Round(time.Millisecond), s.MaxSkew)
	if n.State == NodeFenced || n.State == NodeReleased {
		return what + fmt.Sprintf("its actors are free only %v after that date; fix the clock that is wrong (that node's, or this machine's if it is behind)", s.Takeover())
	}
	return what + "such a lease never goes stale, so no node fences it and its actors stay held until that date; fix the clock that is wrong (that node's, or this machine's if it is behind). wasmkeep cluster fence stops the node, but the fence keeps the date"
}

// RecordsNaming reads every ownership record of every app with state in
// b, the shared root (owners/ under each app's state root), counting those
// that name node id as their holder. A record that does not decode is an
// error naming its key.
func RecordsNaming(ctx context.Context, b bucket.Bucket, id string) (int, error) {
	apps, err := Apps(ctx, b)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range apps {
		c, err := recordsNaming(ctx, bucket.Under(b, a.StateRoot()), id)
		if err != nil {
			return 0, fmt.Errorf("app %s: %w", a, err)
		}
		n += c
	}
	return n, nil
}

// recordsNaming counts the records of one app's state view naming id.
func recordsNaming(ctx context.Context, b bucket.Bucket, id string) (int, error) {
	entries, err := bucket.ListAll(ctx, b, ownership.Prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		o, err := b.Get(ctx, e.Key, bucket.GetOptions{})
		if errors.Is(err, bucket.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", e.Key, err)
		}
		body, err := io.ReadAll(io.LimitReader(o.Body, 4<<10))
		o.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", e.Key, err)
		}
		r, err := ownership.Decode(body)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", e.Key, err)
		}
		if r.Node == id {
			n++
		}
	}
	return n, nil
}

// RefusedError is a refusal of Forget: forgetting nodes/<id> would not be
// safe, for the reason it gives.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// Forgotten is what Forget did.
type Forgotten struct {
	Forgot  bool             // nodes/<id> was marked forgotten
	Already bool             // nodes/<id> was forgotten already: nothing written
	Object  nodelease.Object // the lease as it was before it was forgotten (Forgot), or as found (Already)
	Records int              // with no object: the records that still name the node
}

// Forget is `wasmkeep cluster forget`: it marks nodes/<id> forgotten
// (nodelease.MarkForgotten, ADR 1041) only when that is safe at now (the
// operator's clock): not a live lease, whatever its age (the node may be
// running: stop or fence it first); not an object that is no node lease
// (fence it first: the fence replaces it); not a fenced or released lease
// younger than ttl + grace (its actors are not free yet); and no
// ownership record naming the node (a retired id frees nothing: those
// actors would stay held for ever). Each refusal is a *RefusedError. The
// mark is written If-Match the version these checks read, so a process
// that started with the id while they ran (its lease written meanwhile)
// refuses the forget rather than losing its lease; nothing is deleted.
// With no object it writes nothing and counts the records that still name
// the node.
func Forget(ctx context.Context, b bucket.Bucket, id string, s nodelease.Settings, now time.Time) (Forgotten, error) {
	if err := nodelease.CheckNodeID(id); err != nil {
		return Forgotten{}, err
	}
	r, err := nodelease.ReadObject(ctx, b, id)
	if err != nil {
		return Forgotten{}, fmt.Errorf("reading nodes/%s: %w", id, err)
	}
	if !r.Found {
		n, err := RecordsNaming(ctx, b, id)
		return Forgotten{Records: n}, err
	}
	o := r.Object
	switch {
	case r.Err != nil:
		return Forgotten{}, &RefusedError{fmt.Sprintf("nodes/%s is not a node lease (%v): fence it first (wasmkeep cluster fence %s replaces it), then forget it %v later", id, r.Err, id, s.Takeover())}
	case o.State == nodelease.Forgotten:
		return Forgotten{Already: true, Object: o}, nil
	case o.State == nodelease.Live:
		return Forgotten{}, &RefusedError{fmt.Sprintf("nodes/%s is live (last written %v ago, at %s): stop the node (it writes released), or fence it, and forget it %v after its last write",
			id, now.Sub(o.WrittenAt).Round(time.Millisecond), o.Info.Advertise, s.Takeover())}
	case now.Before(o.WrittenAt.Add(s.Takeover())):
		return Forgotten{}, &RefusedError{fmt.Sprintf("nodes/%s is %s, but its actors are not free until %v after its last write (%v from now): try again then",
			id, o.State, s.Takeover(), o.WrittenAt.Add(s.Takeover()).Sub(now).Round(time.Millisecond))}
	}
	n, err := RecordsNaming(ctx, b, id)
	if err != nil {
		return Forgotten{}, err
	}
	if n > 0 {
		return Forgotten{}, &RefusedError{fmt.Sprintf("%d ownership records still name node %s: forgotten, they would stay held for ever; start a node with this id, or request those actors so that another node takes them, then forget it", n, id)}
	}
	_, err = nodelease.MarkForgotten(ctx, b, id, r)
	if errors.Is(err, bucket.ErrPrecondition) {
		return Forgotten{}, &RefusedError{fmt.Sprintf("nodes/%s changed while forget checked it (a process started with this id?): nothing written; run forget again to decide on what it is now", id)}
	}
	if err != nil {
		return Forgotten{}, fmt.Errorf("marking nodes/%s forgotten: %w", id, err)
	}
	return Forgotten{Forgot: true, Object: o}, nil
}

// ServedVersions are the deployed versions of app a that nodes say they
// run (Info.Serving), from every lease not yet released or fenced, live or
// stale: a node frozen for a while still runs its version when it wakes.
// Collection spares them (deploys.Collect).
func ServedVersions(ctx context.Context, b bucket.Bucket, a app.Name) (map[string]bool, error) {
	peers, err := membership.List(ctx, b, nil)
	if err != nil {
		return nil, err
	}
	served := map[string]bool{}
	for _, p := range peers {
		if p.Err != nil || p.Object.State != nodelease.Live || p.Object.Info.App != a.String() {
			continue
		}
		if s, err := nodelease.ParseServing(p.Object.Info.Serving); err == nil && s.Version != "" {
			served[s.Version] = true
		}
	}
	return served, nil
}

// SecretsUnread lists the live nodes of app a, by the lease timings s at
// now, whose heartbeat does not say they read the app's secrets: an older
// node, or one run without them. A secrets change would reach them as
// unset values (wasmkeep secrets refuses it without --force).
func SecretsUnread(ctx context.Context, b bucket.Bucket, a app.Name, s nodelease.Settings, now time.Time) ([]string, error) {
	return liveOf(ctx, b, a, s, now, func(p membership.Peer) bool { return !p.Object.Info.Secrets })
}

// LiveNodes lists the live nodes of app a, by the lease timings s at now
// (wasmkeep app delete refuses while there are any, without --force).
func LiveNodes(ctx context.Context, b bucket.Bucket, a app.Name, s nodelease.Settings, now time.Time) ([]string, error) {
	return liveOf(ctx, b, a, s, now, func(membership.Peer) bool { return true })
}

// liveOf lists the live nodes of app a that pick keeps.
func liveOf(ctx context.Context, b bucket.Bucket, a app.Name, s nodelease.Settings, now time.Time, pick func(membership.Peer) bool) ([]string, error) {
	peers, err := membership.List(ctx, b, nil)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range peers {
		if p.Live(now, s) && p.Object.Info.App == a.String() && pick(p) {
			ids = append(ids, p.ID)
		}
	}
	return ids, nil
}
