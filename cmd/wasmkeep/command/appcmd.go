package command

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

func appCommand(reg *plugin.Registry) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "app",
		Short: "Act on a whole app in the bucket",
	}, exitFailed)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitErr{exitFailed, err} })
	var f clusterCmdFlags
	del := &cobra.Command{
		Use:   "delete TENANT/APP",
		Short: "Delete an app: its tombstone, then every object of it in the bucket",
		Long: `Delete an app (book ADR 0028, section 5; ADR 1053). First its tombstone,
apps/TENANT/APP/deleted, created once and kept for good: from then on a
deploy or a rollback of the app is refused, and a node refuses to start
serving it. Then every other object under state/TENANT/APP/ (its actors'
histories, ownership records, alarm index, delete requests) and
apps/TENANT/APP/ (every deployed version and the sealed secrets). Keys
held outside the bucket (the secrets key) are the operator's to destroy.

Refused while a node of the app is live (stop them first), naming the
nodes, unless --force (after cluster fence of each, whose processes then
stop at their next lease write): a node still running would keep writing
the app's state. Run again, it resumes (the tombstone is kept). An app of
which nothing is in the bucket (a mistyped name) is refused too, unless
--force: its tombstone would stay for good.

Exit status: 0 once the app is deleted, 1 when refused, 2 on an error.`,
		Example: `  wasmkeep app delete acme/legacy --bucket s3://wasmkeep-demo`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitErr{exitFailed, fmt.Errorf("want one app, TENANT/APP; got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := app.Parse(args[0])
			if err != nil {
				return &exitErr{exitFailed, err}
			}
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, cfg *config.Config, _ string) error {
				return appDelete(ctx, cmd.OutOrStdout(), b, cfg.Cluster.Lease(), a, f.force)
			})
		},
	}
	fl := del.Flags()
	fl.BoolVar(&f.force, "force", false, "delete while nodes of the app still look live (after wasmkeep cluster fence of each)")
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults (its cluster: timings judge liveness)")
	f.cluster.bind(fl, false)
	cmd.AddCommand(del)
	return cmd
}

// appDelete writes a's tombstone, then removes the app's objects.
func appDelete(ctx context.Context, out io.Writer, b bucket.Bucket, s nodelease.Settings, a app.Name, force bool) error {
	if a == app.Default {
		return &exitErr{exitNo, fmt.Errorf("refused: %s is the implicit app of serve --actor, whose nodes do not follow deploys", a)}
	}
	switch exists, err := deploys.AppExists(ctx, b, a); {
	case err != nil:
		return err
	case !exists && !force: // a mistyped name would leave a tombstone for good
		return &exitErr{exitNo, fmt.Errorf("refused: nothing of %s is in the bucket (a mistyped name?); give --force to write its tombstone all the same", a)}
	}
	live, err := cluster.LiveNodes(ctx, b, a, s, time.Now())
	if err != nil {
		return fmt.Errorf("reading the nodes' heartbeats: %w", err)
	}
	if len(live) > 0 && !force {
		return &exitErr{exitNo, fmt.Errorf("refused: live nodes of %s: %s; stop them (or wasmkeep cluster fence each) and give --force", a, strings.Join(live, ", "))}
	}
	host, _ := os.Hostname()
	created, err := deploys.WriteTombstone(ctx, b, a, fmt.Appendf(nil, "deleted by wasmkeep app delete on %s at %s\n", host, time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		return fmt.Errorf("writing %s: %w", deploys.TombstoneKey(a), err)
	}
	if created {
		fmt.Fprintf(out, "wrote %s: deploys of %s and node starts on it are refused from now on\n", deploys.TombstoneKey(a), a)
	} else {
		fmt.Fprintf(out, "%s was there already: resuming\n", deploys.TombstoneKey(a))
	}
	n, err := deploys.RemoveApp(ctx, b, a)
	if err != nil {
		return fmt.Errorf("removed %d objects of %s, then: %w (run the command again)", n, a, err)
	}
	fmt.Fprintf(out, "deleted %s: removed %d objects under %s and %s; the tombstone stays\n", a, n, a.StateRoot(), a.DeployRoot())
	return nil
}
