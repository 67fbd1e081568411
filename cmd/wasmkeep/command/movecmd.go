package command

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// actorMoveCommand is `wasmkeep actor move`.
func actorMoveCommand(reg *plugin.Registry) *cobra.Command {
	var f clusterCmdFlags
	var to string
	move := &cobra.Command{
		Use:   "move TENANT/APP/CLASS/NAME --to NODE",
		Short: "Move one actor to a named node (it is not pinned there)",
		Long: `Write the move request control/move/CLASS/NAME/NODE under the app's root
(book ADR 0017; ADR 1052; NAME in hex). Within a heartbeat period the
node that holds the actor hands it over, as a drain hands over each of
its actors: its WebSockets close with 1012, its queued events run and are
uploaded, its hold is released, and every event for it meanwhile goes to
NODE, which takes it (acquires and restores it, and arms its alarm). If
no node holds the actor, NODE takes it itself. A name that was never an
actor is not created. A request that cannot be done now (the target not
live, draining, of another app, or too old to take actors; a socket that
will not close) is tried every heartbeat until it expires, 5 minutes
after it was written. The move does not pin the actor: once idle it
hibernates on NODE, and its next event takes it wherever that lands.

Refused for an app that was deleted (wasmkeep app delete), and for a node
id no live node has (a mistyped request would wait 5 minutes for
nothing), unless --force (for a node about to start).

Exit status: 0 once the request is written, 1 when refused, 2 on an error.`,
		Example: `  wasmkeep actor move acme/chat/room/lobby --to node-c --bucket s3://acme-wasmkeep/prod`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitErr{exitFailed, fmt.Errorf("want one actor, TENANT/APP/CLASS/NAME, got %d arguments", len(args))}
			}
			if _, _, _, err := parseActor(args[0]); err != nil {
				return &exitErr{exitFailed, err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nodelease.CheckNodeID(to); err != nil {
				return &exitErr{exitFailed, fmt.Errorf("--to: %w", err)}
			}
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return actorMove(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), args[0], to, f.force)
			})
		},
	}
	fl := move.Flags()
	fl.StringVar(&to, "to", "", "the node to move the actor to (required)")
	move.MarkFlagRequired("to")
	fl.BoolVar(&f.force, "force", false, "write the request even though no live node has the id")
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults (its cluster: timings judge liveness)")
	f.cluster.bind(fl, false)
	return move
}

func actorMove(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, actor, to string, force bool) error {
	a, class, name, err := parseActor(actor)
	if err != nil {
		return &exitErr{exitFailed, err}
	}
	if err := deploys.RefuseDeleted(ctx, b, a); errors.Is(err, deploys.ErrAppDeleted) {
		return &exitErr{exitNo, err}
	} else if err != nil {
		return err // the bucket did not answer: exit 2
	}
	live, r, err := liveNode(ctx, b, s, to)
	if err != nil {
		return err
	}
	if !live && !force {
		return &exitErr{exitNo, fmt.Errorf("refused: no live node has id %q (cluster status lists them); --force writes the request anyway, for a node about to start", to)}
	}
	key, err := cluster.RequestMove(ctx, bucket.Under(b, a.StateRoot()), class, name, to)
	if err != nil {
		return fmt.Errorf("writing the move request: %w", err)
	}
	fmt.Fprintf(out, "wrote %s%s: the actor moves to node %s within a heartbeat period\n", a.StateRoot(), key, to)
	info := r.Object.Info
	switch {
	case !live:
	case info.App != a.String():
		fmt.Fprintf(out, "warning: node %s serves app %s, not %s: the request waits until it expires\n", to, info.App, a)
	case info.Taking != nodelease.Takes:
		fmt.Fprintf(out, "warning: node %s is %s: the request waits until it takes actors or expires\n", to, info.Taking)
	case !info.HasCapability(nodelease.CapabilityTake):
		fmt.Fprintf(out, "warning: node %s does not take moved actors (its version is too old): the request waits until it expires\n", to)
	}
	return nil
}
