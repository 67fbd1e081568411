package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deletes"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// exitPending: actor delete's request is written and not carried out
// within the wait; the cluster keeps trying.
const exitPending = 3

// deleteWaitMax is the longest --wait: below the request's expiry.
const deleteWaitMax = 3000

// deletePoll is how often actor delete reads its request's outcome.
const deletePoll = 250 * time.Millisecond

// actorCommand is `wasmkeep actor`: move and delete one actor of an app,
// each through a request in the bucket.
func actorCommand(reg *plugin.Registry) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "actor",
		Short: "Move or delete one actor of an app, through requests in the bucket",
	}, exitFailed)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitErr{exitFailed, err} })
	cmd.AddCommand(actorMoveCommand(reg), actorDeleteCommand(reg))
	return cmd
}

// parseActor reads TENANT/APP/CLASS/NAME, the name percent-encoded where
// it holds / or %.
func parseActor(s string) (app.Name, string, string, error) {
	parts := strings.SplitN(s, "/", 4)
	if len(parts) != 4 {
		return app.Name{}, "", "", fmt.Errorf("bad actor address %q: want TENANT/APP/CLASS/NAME", s)
	}
	a := app.Name{Tenant: parts[0], App: parts[1]}
	if err := a.Check(); err != nil {
		return app.Name{}, "", "", fmt.Errorf("bad actor address %q: %w", s, err)
	}
	if parts[2] == "" {
		return app.Name{}, "", "", fmt.Errorf("bad actor address %q: no class", s)
	}
	name, err := url.PathUnescape(parts[3])
	if err == nil {
		err = address.CheckName(name)
	}
	if err != nil {
		return app.Name{}, "", "", fmt.Errorf("bad actor address %q: %w", s, err)
	}
	return a, parts[2], name, nil
}

// actorDeleteCommand is `wasmkeep actor delete`.
func actorDeleteCommand(reg *plugin.Registry) *cobra.Command {
	var f clusterCmdFlags
	var wait int
	var noWait bool
	del := &cobra.Command{
		Use:   "delete TENANT/APP/CLASS/NAME",
		Short: "Delete an actor: its data goes, its next event finds a new, empty actor",
		Long: `Write a delete request for the actor in the bucket
(state/TENANT/APP/deletes/CLASS/NAME/ID; book ADR 0028, ADR 1053): the
command never calls a node. Within a heartbeat period (3 s by default) the
node that holds the actor, or one that takes it when nobody holds it, runs
a delete job in its mailbox after the events queued there: no code of the
actor runs; its WebSockets close with 1000 "actor deleted"; its alarm is
cleared; its history in the bucket ends in an empty database (its next
event finds a new actor, on-init runs again) and what came before is
erased. The node then writes the request's outcome beside it.

Refused, with nothing written, for an actor with no history in the bucket
(a mistyped name is never created), and for an app deleted (app delete). A request no node carries out (no
node serves the class) expires after an hour.

--wait SECS (default 60, at most 3000) waits for the outcome; --no-wait
returns once the request is written.

Exit status: 0 once deleted (or, with --no-wait, requested); 1 for no such
actor, or a request dropped with no outcome (nothing known to be deleted);
3 when the request is still pending at the end of the wait (the cluster
keeps trying until it expires); 2 on an error.`,
		Example: `  wasmkeep actor delete acme/shop/cart/u-1842 --bucket s3://wasmkeep-demo
  wasmkeep actor delete acme/shop/cart/u-1842 --bucket s3://wasmkeep-demo --no-wait`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitErr{exitFailed, fmt.Errorf("want one actor, TENANT/APP/CLASS/NAME; got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, class, name, err := parseActor(args[0])
			if err != nil {
				return &exitErr{exitFailed, err}
			}
			actor := history.Actor{Tenant: a.Tenant, Class: class, Name: name}
			if wait < 0 || wait > deleteWaitMax {
				return &exitErr{exitFailed, fmt.Errorf("--wait %d: from 0 to %d seconds", wait, deleteWaitMax)}
			}
			d := time.Duration(wait) * time.Second
			if noWait {
				d = 0
			}
			f.timeout = clusterCmdTimeout + d
			return withCluster(cmd, reg, f, func(ctx context.Context, b bucket.Bucket, _ *config.Config, _ string) error {
				if err := deploys.RefuseDeleted(ctx, b, a); errors.Is(err, deploys.ErrAppDeleted) {
					return &exitErr{exitNo, err}
				} else if err != nil {
					return err // the bucket did not answer: exit 2
				}
				return actorDelete(ctx, cmd.OutOrStdout(), bucket.Under(b, a.StateRoot()), actor, d)
			})
		},
	}
	fl := del.Flags()
	fl.IntVar(&wait, "wait", 60, "seconds to wait for the outcome (at most 3000)")
	fl.BoolVar(&noWait, "no-wait", false, "return once the request is written")
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults")
	f.cluster.bind(fl, false)
	return del
}

// actorDelete writes the request on the app's state view and, for up to
// wait, reads its outcome.
func actorDelete(ctx context.Context, out io.Writer, state bucket.Bucket, actor history.Actor, wait time.Duration) error {
	r, err := deletes.New(actor)
	if err != nil {
		return &exitErr{exitFailed, err}
	}
	found, err := history.Exists(ctx, state, actor)
	if err != nil {
		return err
	}
	if !found {
		return &exitErr{exitNo, fmt.Errorf("no such actor %s: it has no history in the bucket; nothing was written", actor)}
	}
	if err := deletes.Write(ctx, state, r); err != nil {
		return fmt.Errorf("writing the request %s: %w", r.Key(), err)
	}
	if wait == 0 {
		fmt.Fprintf(out, "requested the delete of %s (request %s); it expires unless carried out within %v\n", actor, r.ID, deletes.Expiry)
		return nil
	}
	end := time.Now().Add(wait)
	for {
		st, o, err := deletes.Read(ctx, state, r)
		if err != nil {
			return fmt.Errorf("reading the request's outcome: %w", err)
		}
		switch {
		case st == deletes.Ended:
			// Read by this command alone: it goes, as requests do.
			if err := state.Delete(ctx, r.OutcomeKey(o), bucket.Condition{}); err != nil {
				fmt.Fprintf(out, "warning: the outcome %s stays until it expires: %v\n", r.OutcomeKey(o), err)
			}
			if o == deletes.Absent {
				return &exitErr{exitNo, fmt.Errorf("no such actor %s: the node found no history of it; nothing was deleted", actor)}
			}
			fmt.Fprintf(out, "Deleted %s\n", actor)
			return nil
		case st == deletes.Dropped:
			return &exitErr{exitNo, fmt.Errorf("dropped: the request for %s is gone with no outcome (expired); nothing is known to be deleted", actor)}
		case !time.Now().Before(end):
			return &exitErr{exitPending, fmt.Errorf("requested the delete of %s (request %s); not carried out within %v: the cluster keeps trying until the request expires, %v after it was written",
				actor, r.ID, wait, deletes.Expiry)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(deletePoll):
		}
	}
}
