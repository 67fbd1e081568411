package command

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/membership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Exit statuses of the cluster commands, for scripts.
const (
	exitNo     = 1 // status: no live node; forget: refused
	exitFailed = 2 // the bucket could not be read or written, bad flags, an unknown command
)

// clusterCmdTimeout bounds one cluster command's requests to the bucket.
const clusterCmdTimeout = 2 * time.Minute

type clusterCmdFlags struct {
	config  string
	json    bool
	force   bool          // drain, undrain: for an id no live node has
	timeout time.Duration // [clusterCmdTimeout] for the whole command
	cluster clusterFlags
}

func clusterCommand(reg *plugin.Registry) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "cluster",
		Short: "Look at and act on the cluster's nodes, from their leases in the bucket (nodes/<id>)",
	}, exitFailed)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitErr{exitFailed, err} })
	var f clusterCmdFlags
	status := &cobra.Command{
		Use:   "status",
		Short: "List the nodes from their leases: live or not, version, addresses, pin, lease age",
		Long: `List the nodes from their leases (nodes/<id>) in the bucket alone, so it works
from any machine that can read the bucket, whether or not any node answers.
A node is live if its lease is live and was written within the horizon
(three heartbeat periods plus max_skew, 10 s with the defaults), the rule
the nodes use, with the cluster: settings of plugins.yaml; ages are on this
machine's clock. A fenced or released lease is not live whatever its age.
Apps with a deployed version (apps/TENANT/APP/current) follow: the version
and its seq.
STATE is what the node does for its app: serving; behind (it cannot apply
the app's current version); draining, drained or stuck while it takes no
actor (cluster drain). ROOM is how many more actors the node would start
now, from its last heartbeat (a full node sends a new actor to a peer with
room rather than answer 503).
Warnings: no live node; live nodes mixing plain and the cluster listener;
live nodes on different versions; a node behind its app; a stuck node; a node serving a
version older than its app's current a minute after that was deployed, or
serving an app with no current; a current that cannot be read; a lease
dated ahead of this clock by more than max_skew.

Exit status: 0 if at least one node is live, 1 if none is (an empty bucket
too), 2 on an error (a bucket it cannot read, bad flags).`,
		Example: `  wasmkeep cluster status --bucket s3://wasmkeep-demo
  wasmkeep cluster status --bucket file:///srv/wasmkeep-bucket --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, where string) error {
				return clusterStatus(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), where, f.json)
			})
		},
	}
	status.Flags().BoolVar(&f.json, "json", false, "print JSON, for scripts")
	fence := &cobra.Command{
		Use:   "fence NODE",
		Short: "Revoke a node's process: fence its lease, so it stops at its next lease write and its actors are free",
		Long: `Fence a node's lease (book ADR 0020): a live nodes/NODE is replaced, on the
condition that it is still the version read, by a fence keeping its last
write's date; the process stops at its next lease write, and the actors it
held are free ttl + grace (15 s by default) after that date. A fenced or
released lease is left as it is. With no nodes/NODE (deleted, the machine
gone) a fence is created, dated by the bucket's time for that write and
never earlier than this machine's clock; an object that is not a node
lease is replaced the same way. A fence revokes the process, not the
machine: a service manager that restarts it starts a new process.

Exit status: 0 once the node is fenced (by this command or before) or
released, 2 on an error.`,
		Example: `  wasmkeep cluster fence node-b --bucket s3://wasmkeep-demo`,
		Args:    oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return clusterFence(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), args[0])
			})
		},
	}
	forget := &cobra.Command{
		Use:   "forget NODE",
		Short: "Retire a stopped node's lease, when that is safe, so that status no longer shows it",
		Long: `Mark nodes/NODE forgotten, only when that is safe: refused for a live lease,
whatever its age (stop the node, or fence it), for an object that is not a
node lease (fence it first), for a fenced or released lease younger than
ttl + grace (15 s by default), and while any ownership record of any app
(state/TENANT/APP/owners/) still names the node: a retired lease frees
nothing, so those actors would stay held for ever. The command lists
state/ and reads every record.

The lease is replaced, If-Match the version checked, by the same object
marked forgotten, never deleted (ADR 1041): a node started with this id
while the command ran keeps its lease (the command is then refused), and
one started later takes the forgotten object as it takes a released one.
cluster status leaves forgotten nodes out.

Exit status: 0 when forgotten (or there was nothing to forget), 1 when
refused, saying why, 2 on an error.`,
		Example: `  wasmkeep cluster forget node-b --bucket s3://wasmkeep-demo`,
		Args:    oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return clusterForget(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), args[0])
			})
		},
	}
	drain := &cobra.Command{
		Use:   "drain NODE",
		Short: "Take a node out of service without stopping it: it takes no actor and hands over those it holds",
		Long: `Write the drain request control/drain/NODE (book ADR 0014, ADR 1051). The
node reads it within a heartbeat period (3 s by default) and then claims no
actor: an actor no node holds that it is asked for goes to a live node of
the same app that takes actors. It hands over those it holds, 16 at a
time: their WebSockets close with 1012 (clients reconnect and land on the
new holder), their queued events run and are uploaded, their holds are
released. cluster status shows it draining, then drained once it holds
nothing and has no WebSocket: it can then be stopped with nothing to hand
over. With no other node of its app taking actors it keeps serving what
it holds and shows stuck.

Refused for an id no live node has (a mistyped request would stay in the
bucket), unless --force (for a node about to start).

Exit status: 0 once the request is written, 1 when refused, 2 on an error.`,
		Example: `  wasmkeep cluster drain node-b --bucket s3://wasmkeep-demo
  wasmkeep cluster status --bucket s3://wasmkeep-demo   # wait for STATE drained`,
		Args: oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return clusterDrain(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), args[0], f.force)
			})
		},
	}
	undrain := &cobra.Command{
		Use:   "undrain NODE",
		Short: "Withdraw a node's drain request: it takes actors again",
		Long: `Delete the drain request control/drain/NODE: within a heartbeat period the
node takes actors again and cluster status shows it serving. A node that
takes no actor because it cannot open its app's secrets stays so.

Refused for an id no live node has unless its request is there (it is
withdrawn then) or --force.

Exit status: 0 once the request is gone, 1 when refused, 2 on an error.`,
		Example: `  wasmkeep cluster undrain node-b --bucket s3://wasmkeep-demo`,
		Args:    oneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return clusterUndrain(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), args[0], f.force)
			})
		},
	}
	for _, c := range []*cobra.Command{drain, undrain} {
		c.Flags().BoolVar(&f.force, "force", false, "write or delete the request even though no live node has the id")
	}
	for _, c := range []*cobra.Command{status, fence, forget, drain, undrain} {
		fl := c.Flags()
		fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults (its cluster: timings judge liveness)")
		f.cluster.bind(fl, false)
		cmd.AddCommand(c)
	}
	return cmd
}

// exitErr is an error with the exit status Main returns for it.
type exitErr struct {
	code int
	err  error // nil: nothing more to print
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitErr) Unwrap() error { return e.err }

func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return &exitErr{exitFailed, err}
	}
	return nil
}

func oneNode(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return &exitErr{exitFailed, fmt.Errorf("want one node id, got %d arguments", len(args))}
	}
	if err := nodelease.CheckNodeID(args[0]); err != nil {
		return &exitErr{exitFailed, err}
	}
	return nil
}

// withCluster loads the configuration and opens the bucket --bucket or
// plugins.yaml names, as the bucket commands do, and runs fn with the
// bucket's URL (or plugin) for messages; an error fn does not give an
// exit status of its own exits with 2.
func withCluster(cmd *cobra.Command, reg *plugin.Registry, f clusterCmdFlags, fn func(context.Context, bucket.Bucket, *config.Config, string) error) error {
	err := func() error {
		b, cfg, ch, err := chosenConfig(reg, f.config, f.cluster.layers(cmd.Flags())...)
		if err != nil {
			return err
		}
		defer b.Close()
		where := cfg.Cluster.Bucket
		if where == "" {
			where = ch.Info.ID()
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, cmp.Or(f.timeout, clusterCmdTimeout))
		defer cancel()
		return fn(ctx, b, cfg, where)
	}()
	var ee *exitErr
	if err != nil && !errors.As(err, &ee) {
		err = &exitErr{exitFailed, err}
	}
	return err
}

// statusJSON is one node in --json.
type statusJSON struct {
	ID             string   `json:"id"`
	Live           bool     `json:"live"`
	State          string   `json:"state"`           // live, stale, fenced, released or unreadable
	Lease          string   `json:"lease,omitempty"` // the lease's own state: live, fenced or released
	Instance       string   `json:"instance,omitempty"`
	Version        string   `json:"version"`
	App            string   `json:"app"`
	Run            string   `json:"run,omitempty"`    // for its app: serving, behind, draining, drained or stuck
	Serving        string   `json:"serving"`          // the deployed version it runs, "" for none
	Seq            uint64   `json:"seq"`              // that version's seq
	Since          string   `json:"since,omitempty"`  // since when it runs it
	Behind         string   `json:"behind,omitempty"` // why it cannot apply the app's current version
	Room           int      `json:"room"`             // how many more actors it would start (heartbeat line 14)
	Advertise      string   `json:"advertise"`
	ClusterAddress string   `json:"cluster_address"`
	Pin            string   `json:"pin"`
	Pins           []string `json:"pins"`
	WrittenAt      string   `json:"written_at,omitempty"`
	AgeMS          int64    `json:"age_ms"`
	AheadMS        int64    `json:"ahead_ms"`
	Error          string   `json:"error,omitempty"`
}

func clusterStatus(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, where string, asJSON bool) error {
	st, err := cluster.ReadStatus(ctx, b, s, clock.Real)
	if err != nil {
		return err
	}
	if asJSON {
		err = statusAsJSON(out, st, s, where)
	} else {
		err = statusTable(out, st, s, where)
	}
	if err == nil && st.Live == 0 {
		return &exitErr{code: exitNo}
	}
	return err
}

// appJSON is one app with a current in --json.
type appJSON struct {
	App        string `json:"app"`
	Version    string `json:"version"` // its current version, "" when unreadable
	Seq        uint64 `json:"seq"`
	DeployedAt string `json:"deployed_at,omitempty"` // when current was written, on the bucket's clock
	Error      string `json:"error,omitempty"`
}

func statusAsJSON(out io.Writer, st cluster.Status, s nodelease.Settings, where string) error {
	apps := []appJSON{}
	for _, d := range st.Apps {
		j := appJSON{App: d.App.String(), Version: d.Current.Version, Seq: d.Current.Seq}
		if d.Err != nil {
			j.Error = d.Err.Error()
		} else {
			j.DeployedAt = d.At.UTC().Format(time.RFC3339Nano)
		}
		apps = append(apps, j)
	}
	nodes := []statusJSON{}
	for _, n := range st.Nodes {
		j := statusJSON{ID: n.ID, Live: n.State == cluster.NodeLive, State: string(n.State), Pins: []string{}}
		if n.Err != nil {
			j.Error = n.Err.Error()
		} else {
			o := n.Object
			j.Lease, j.Instance, j.Version, j.Advertise, j.ClusterAddress = string(o.State), o.Instance, o.Info.Version, o.Info.Advertise, o.Info.ClusterAddr
			j.App, j.Run, j.Serving, j.Seq, j.Behind, j.Room = o.Info.App, n.Run(), n.Serving.Version, n.Serving.Seq, o.Info.Behind, o.Info.Room
			if j.Serving != "" {
				j.Since = n.Serving.Since.UTC().Format(time.RFC3339Nano)
			}
			j.Pin, j.Pins = n.Pin(), append(j.Pins, o.Info.Pins...)
			j.WrittenAt = o.WrittenAt.UTC().Format(time.RFC3339Nano)
			j.AgeMS, j.AheadMS = n.Age.Milliseconds(), n.Ahead().Milliseconds()
		}
		nodes = append(nodes, j)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{
		"bucket": where, "at": st.At.UTC().Format(time.RFC3339Nano), "horizon_ms": s.Horizon().Milliseconds(),
		"live": st.Live, "nodes": nodes, "apps": apps, "warnings": append([]string{}, st.Warnings...),
		"plain": append([]string{}, st.Plain...), "cluster_listener": append([]string{}, st.Listener...),
		"versions": append([]string{}, st.Versions...), "forgotten": append([]string{}, st.Forgotten...),
	})
}

func statusTable(out io.Writer, st cluster.Status, s nodelease.Settings, where string) error {
	fmt.Fprintf(out, "Cluster %s (live: lease written within %v)\n\n", where, s.Horizon().Round(time.Millisecond))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLIVE\tAGE\tSTATE\tROOM\tVERSION\tAPP\tSERVING\tADDRESS\tCLUSTER ADDRESS\tPIN")
	for _, n := range st.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\tunreadable\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", cmp.Or(n.ID, nodelease.Prefix))
			continue
		}
		live := "no (" + string(n.State) + ")"
		if n.State == cluster.NodeLive {
			live = "yes"
		}
		i := n.Object.Info
		serving := "-"
		if n.Serving.Version != "" {
			serving = fmt.Sprintf("%s (seq %d)", n.Serving.Version, n.Serving.Seq)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, live, age(n.Age), n.Run(), i.Room, dash(i.Version), dash(i.App), serving,
			dash(i.Advertise), dash(i.ClusterAddr), dash(shortPin(n.Pin())))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Apps) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "APP\tDEPLOYED VERSION\tSEQ")
		for _, d := range st.Apps {
			if d.Err != nil {
				fmt.Fprintf(tw, "%s\tunreadable\t-\n", d.App) // the warning says why
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\n", d.App, d.Current.Version, d.Current.Seq)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n%d of %d nodes live", st.Live, len(st.Nodes))
	if st.Live > 0 {
		vs := make([]string, len(st.Versions))
		for i, v := range st.Versions {
			vs[i] = dash(v)
		}
		fmt.Fprintf(out, "; TLS: %d with a cluster listener, %d plain; version: %s", len(st.Listener), len(st.Plain), strings.Join(vs, ", "))
	}
	if len(st.Forgotten) > 0 {
		fmt.Fprintf(out, "; not shown, forgotten: %s", strings.Join(st.Forgotten, ", "))
	}
	fmt.Fprintln(out)
	for _, w := range st.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortPin is a pin's first 16 characters.
func shortPin(p string) string {
	if len(p) > 19 {
		return p[:16] + "..."
	}
	return p
}

// age renders a lease's age for the table: 979ms, 2.2s, 14m, 5h, 3d, or
// "ahead 2.0s" for a date ahead of this clock.
func age(d time.Duration) string {
	if d < 0 {
		return "ahead " + age(-d)
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// at renders a time for messages, in UTC to the millisecond.
func at(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// until says how far t is from now: "in 12.3s" or "passed 4m ago".
func until(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + age(d)
	}
	return "passed " + age(now.Sub(t)) + " ago"
}

func clusterFence(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, id string) error {
	res, err := nodelease.FenceByOperator(ctx, b, id, time.Now())
	if err != nil {
		return err
	}
	now := time.Now()
	o := res.Object
	free := o.WrittenAt.Add(s.Takeover())
	freeAt := fmt.Sprintf("%s (%s; ttl + grace after %s)", at(free), until(free, now), at(o.WrittenAt))
	switch res.Did {
	case nodelease.FencedLive:
		fmt.Fprintf(out, "fenced node %s (instance %s, at %s): its process stops at its next lease write; its actors are free at %s\n",
			id, o.Instance, dash(o.Info.Advertise), freeAt)
	case nodelease.FencedAbsent:
		fmt.Fprintf(out, "nodes/%s did not exist: created a fence dated %s; a process still running as %s stops at its next lease write, and the actors recorded as %s's are free at %s\n",
			id, at(o.WrittenAt), id, id, freeAt)
	case nodelease.FencedUnreadable:
		fmt.Fprintf(out, "nodes/%s was not a node lease (%v): replaced it with a fence dated %s; the actors recorded as %s's are free at %s\n",
			id, res.Unreadable, at(o.WrittenAt), id, freeAt)
	case nodelease.WasFenced:
		fmt.Fprintf(out, "node %s was already fenced, nothing written; its actors are free at %s\n", id, freeAt)
	case nodelease.WasReleased:
		fmt.Fprintf(out, "node %s stopped cleanly (its lease is released), nothing written; its actors are free at %s\n", id, freeAt)
	case nodelease.WasForgotten:
		fmt.Fprintf(out, "node %s was forgotten (no process runs under it), nothing written\n", id)
	}
	return nil
}

func clusterForget(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, id string) error {
	res, err := cluster.Forget(ctx, b, id, s, time.Now())
	var refused *cluster.RefusedError
	switch {
	case errors.As(err, &refused):
		return &exitErr{exitNo, fmt.Errorf("refused: %w", err)}
	case err != nil:
		return err
	case res.Already:
		fmt.Fprintf(out, "nodes/%s was forgotten already, nothing written\n", id)
	case !res.Forgot && res.Records > 0:
		fmt.Fprintf(out, "nodes/%s does not exist, nothing written; %d ownership records still name %s and stay held until it is fenced: wasmkeep cluster fence %s\n", id, res.Records, id, id)
	case !res.Forgot:
		fmt.Fprintf(out, "nodes/%s does not exist, nothing written\n", id)
	default:
		fmt.Fprintf(out, "forgot nodes/%s (%s, last written %s): cluster status no longer shows it; a node started with this id takes it\n", id, res.Object.State, at(res.Object.WrittenAt))
	}
	return nil
}

// liveNode reports whether node id is live by the leases' rule with s (as
// cluster status counts it), at this machine's time.
func liveNode(ctx context.Context, b bucket.Bucket, s nodelease.Settings, id string) (bool, nodelease.Read, error) {
	r, err := nodelease.ReadObject(ctx, b, id)
	if err != nil {
		return false, r, fmt.Errorf("reading nodes/%s: %w", id, err)
	}
	p := membership.Peer{ID: id, Object: r.Object}
	return r.Found && r.Err == nil && p.Live(time.Now(), s), r, nil
}

func clusterDrain(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, id string, force bool) error {
	live, _, err := liveNode(ctx, b, s, id)
	if err != nil {
		return err
	}
	if !live && !force {
		return &exitErr{exitNo, fmt.Errorf("refused: no live node has id %q (cluster status lists them); --force writes the request anyway, for a node about to start", id)}
	}
	if err := cluster.RequestDrain(ctx, b, id); err != nil {
		return fmt.Errorf("writing %s: %w", cluster.DrainKey(id), err)
	}
	fmt.Fprintf(out, "wrote %s: node %s takes no actor from its next heartbeat and hands over those it holds; wait for STATE drained in wasmkeep cluster status\n", cluster.DrainKey(id), id)
	return nil
}

func clusterUndrain(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, id string, force bool) error {
	live, _, err := liveNode(ctx, b, s, id)
	if err != nil {
		return err
	}
	requested, err := cluster.DrainRequested(ctx, b, id)
	if err != nil {
		return fmt.Errorf("reading %s: %w", cluster.DrainKey(id), err)
	}
	if !live && !requested && !force {
		return &exitErr{exitNo, fmt.Errorf("refused: no live node has id %q and no drain request names it (cluster status lists the nodes); --force deletes the request anyway", id)}
	}
	if err := cluster.WithdrawDrain(ctx, b, id); err != nil {
		return fmt.Errorf("deleting %s: %w", cluster.DrainKey(id), err)
	}
	fmt.Fprintf(out, "deleted %s: node %s takes actors again from its next heartbeat\n", cluster.DrainKey(id), id)
	return nil
}
