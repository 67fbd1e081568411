package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

type bucketFlags struct {
	config, app, actor string
	cluster            clusterFlags
}

func bucketCommand(reg *plugin.Registry) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "bucket",
		Short: "Look at what the cluster keeps in its bucket: actors' histories",
	}, 1)
	var f bucketFlags
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the actors with history in the bucket, and each one's head",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStored(cmd, reg, f, func(_ context.Context, _ bucket.Bucket, all []cluster.Stored) error { return bucketLs(cmd, all) })
		},
	}
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Check every actor's history as a restore would: its chain and every object's checksums",
		Long: `Check every actor's history as a restore would: the chain from its head
back to a snapshot or the first transaction, and every object read, its
LTX checksums and its place in the checksum chain verified. Each actor is
reported ok or with what is broken; the command fails if any is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStored(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, all []cluster.Stored) error {
				return bucketVerify(ctx, cmd, b, all)
			})
		},
	}
	verify.Flags().StringVar(&f.actor, "actor", "", "check one actor: CLASS/NAME (of --app)")
	for _, c := range []*cobra.Command{ls, verify} {
		fl := c.Flags()
		fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults")
		fl.StringVar(&f.app, "app", "", "only this app's actors, TENANT/APP (default: every app with state in the bucket; with --actor: default/default)")
		f.cluster.bind(fl, false)
		cmd.AddCommand(c)
	}
	return cmd
}

// withStored opens the bucket --bucket or plugins.yaml names and runs fn on
// the actors it stores (the one --actor names, if given).
func withStored(cmd *cobra.Command, reg *plugin.Registry, f bucketFlags, fn func(context.Context, bucket.Bucket, []cluster.Stored) error) error {
	b, _, err := chosenBucket(reg, f.config, f.cluster.layers(cmd.Flags())...)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	apps, err := storedApps(ctx, b, f)
	if err != nil {
		return err
	}
	var all []cluster.Stored
	for _, a := range apps {
		stored, err := cluster.ListStored(ctx, b, a)
		if err != nil {
			return fmt.Errorf("app %s: %w", a, err)
		}
		all = append(all, stored...)
	}
	if f.actor != "" {
		class, name, ok := strings.Cut(f.actor, "/")
		if !ok || class == "" || name == "" {
			return fmt.Errorf("--actor %q: want CLASS/NAME", f.actor)
		}
		var one []cluster.Stored
		for _, s := range all {
			if s.Class == class && s.Name == name {
				one = append(one, s)
			}
		}
		if len(one) == 0 {
			return fmt.Errorf("--actor %s: app %s has no history of it in the bucket", f.actor, apps[0])
		}
		all = one
	}
	return fn(ctx, b, all)
}

// storedApps is the app --app names (default/default with --actor), or
// every app with state in the bucket.
func storedApps(ctx context.Context, b bucket.Bucket, f bucketFlags) ([]app.Name, error) {
	switch {
	case f.app != "":
		a, err := app.Parse(f.app)
		if err != nil {
			return nil, fmt.Errorf("--app: %w", err)
		}
		return []app.Name{a}, nil
	case f.actor != "":
		return []app.Name{app.Default}, nil
	}
	return cluster.Apps(ctx, b)
}

func bucketLs(cmd *cobra.Command, all []cluster.Stored) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tACTOR\tHEAD TXID\tGENERATION\tREPLAYS\tOBJECTS\tOTHER KEYS")
	for _, s := range all {
		plan, err := history.PlanRestore(s.Listing)
		head, gen, replays := "broken", "-", "-"
		if err == nil {
			head, gen, replays = fmt.Sprint(plan.Head.TXID), fmt.Sprint(plan.Head.Gen), fmt.Sprint(len(plan.Objects()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.App, s, head, gen, replays, len(s.Listing.Objects), len(s.Listing.Unknown))
	}
	return tw.Flush()
}

func bucketVerify(ctx context.Context, cmd *cobra.Command, b bucket.Bucket, all []cluster.Stored) error {
	out := cmd.OutOrStdout()
	broken := 0
	for _, s := range all {
		plan, err := cluster.Verify(ctx, b, s, "")
		switch {
		case err == nil:
			fmt.Fprintf(out, "ok      %s %s: head %d (generation %d), %d objects replayed\n", s.App, s, plan.Head.TXID, plan.Head.Gen, len(plan.Objects()))
		case errors.Is(err, history.ErrBroken):
			broken++
			fmt.Fprintf(out, "BROKEN  %s %s: %v\n", s.App, s, err)
		default:
			return fmt.Errorf("%s %s: %w", s.App, s, err)
		}
	}
	fmt.Fprintf(out, "%d actors: %d ok, %d broken\n", len(all), len(all)-broken, broken)
	if broken > 0 {
		return fmt.Errorf("%d of %d actors have a broken history", broken, len(all))
	}
	return nil
}
