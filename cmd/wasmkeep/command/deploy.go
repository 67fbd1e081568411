package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

type deployFlags struct {
	app                   string
	actors, access        []string
	configs, requires     []string
	expire                []string
	front                 string
	frontSet              bool // --front given, maybe empty (removing the front)
	rollback, allowReopen bool
	list                  bool
	retentionSecs         int
	seqFloor              uint64
	cluster               clusterFlags
}

func deployCommand(reg *plugin.Registry) *cobra.Command {
	var f deployFlags
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Deploy an app's actor classes, front, rules and configuration to the bucket, roll back, or list its versions",
		Long: `Deploy a new version of an app to the bucket its nodes follow (serve --app):
every module is compiled and checked first, with each runtime of this build,
and nothing is uploaded if one fails. A deploy changes what it names and
keeps the rest: without --actor the current classes are kept; classes not
named keep their rule, configuration and required names. Old versions are
collected after each deploy and rollback: the current one and the five
before it are always kept.`,
		Example: `  wasmkeep deploy --app acme/shop --bucket s3://wasmkeep-demo --actor counter=counter.wasm --actor chat=chat.wasm
  wasmkeep deploy --app acme/shop --bucket s3://wasmkeep-demo --access monitor=existing --config hub=hub.env
  wasmkeep deploy --app acme/shop --bucket s3://wasmkeep-demo --rollback
  wasmkeep deploy --app acme/shop --bucket s3://wasmkeep-demo --list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return deploy(cmd, reg, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.app, "app", "", "the app: TENANT/APP")
	fl.StringArrayVar(&f.actors, "actor", nil, "a class of the new version: CLASS=FILE.wasm (repeatable; given, it is the whole class table)")
	fl.StringVar(&f.front, "front", "", "the stateless component (the app's front) FILE.wasm; --front= removes it")
	fl.StringArrayVar(&f.access, "access", nil, "who outside may reach a class's actors: CLASS=open|existing|existing:NAME,...|internal (repeatable)")
	fl.StringArrayVar(&f.configs, "config", nil, "a class's configuration: CLASS=FILE of NAME=value lines, stored in the clear; CLASS= removes it (repeatable)")
	fl.StringArrayVar(&f.requires, "requires", nil, "names a class needs set: CLASS=NAME,NAME; CLASS= removes them (repeatable)")
	fl.StringArrayVar(&f.expire, "expire-after-idle", nil, "delete a class's actors idle this long: CLASS=DURATION (3600s, 90m, 36h, 7d; at least 1h); CLASS= removes it (repeatable)")
	fl.BoolVar(&f.rollback, "rollback", false, "make the current version's previous one current again")
	fl.BoolVar(&f.allowReopen, "allow-reopen", false, "let --rollback make a class more open")
	fl.BoolVar(&f.list, "list", false, "list the app's versions")
	fl.Uint64Var(&f.seqFloor, "seq-floor", 0, "the new version's seq is at least this: after current was deleted or restored from an older backup, give one above every seq the nodes served (cluster status)")
	fl.IntVar(&f.retentionSecs, "version-retention-secs", 3600, "keep a version this long after it stopped being current; 0 collects at once")
	f.cluster.bind(fl, false)
	return cmd
}

func deploy(cmd *cobra.Command, reg *plugin.Registry, f deployFlags) error {
	a, err := app.Parse(f.app)
	if err != nil {
		return fmt.Errorf("--app: %w", err)
	}
	if f.retentionSecs < 0 {
		return fmt.Errorf("--version-retention-secs %d: cannot be negative", f.retentionSecs)
	}
	f.frontSet = cmd.Flags().Changed("front")
	changes := len(f.actors)+len(f.access)+len(f.configs)+len(f.requires)+len(f.expire) > 0 || f.frontSet
	switch {
	case f.list && (f.rollback || changes):
		return errors.New("--list lists: give it without --rollback, --actor, --front, --access, --config or --requires")
	case f.rollback && changes:
		return errors.New("--rollback goes back to the previous version as it was: give it without --actor, --front, --access, --config or --requires")
	case f.allowReopen && !f.rollback:
		return errors.New("--allow-reopen is for --rollback")
	case f.seqFloor > 0 && (f.list || f.rollback):
		return errors.New("--seq-floor is for a deploy: give it with --actor, --front, --access, --config or --requires")
	case !f.list && !f.rollback && !changes:
		return errors.New("nothing to deploy: give --actor, --front, --access, --config or --requires (or --rollback, --list)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var d deploys.Draft
	if changes {
		// Everything is read and checked before the bucket is opened.
		if d, err = draft(ctx, cmd.ErrOrStderr(), reg, f); err != nil {
			return err
		}
		d.SeqFloor = f.seqFloor
	}
	b, _, err := chosenBucket(reg, "", f.cluster.layers(cmd.Flags())...)
	if err != nil {
		return err
	}
	defer b.Close()
	out := cmd.OutOrStdout()
	if f.list {
		return listVersions(ctx, out, b, a)
	}
	var res deploys.Result
	if f.rollback {
		res, err = deploys.Rollback(ctx, b, a, f.allowReopen)
	} else {
		res, err = deploys.Publish(ctx, b, a, d)
	}
	if errors.Is(err, deploys.ErrConflict) {
		return fmt.Errorf("conflict: %w", err)
	}
	if err != nil {
		return err
	}
	for _, c := range res.Changes {
		fmt.Fprintln(out, "  "+c)
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	if res.NoOp {
		fmt.Fprintf(out, "%s: version %s (seq %d) is current already: nothing deployed\n", a, res.To.Version, res.To.Seq)
	} else {
		fmt.Fprintf(out, "%s: version %s is current, seq %d (was %s)\n", a, res.To.Version, res.To.Seq, orFirst(res.From))
	}
	// Never a version a node still serves, as its heartbeat says: without
	// the heartbeats, nothing is collected.
	served, err := cluster.ServedVersions(ctx, b, a)
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: old versions not collected: the nodes' heartbeats cannot be read to spare the versions they serve:", err)
		return nil
	}
	deleted, err := deploys.Collect(ctx, b, a, time.Duration(f.retentionSecs)*time.Second, time.Now(), served)
	if len(deleted) > 0 {
		fmt.Fprintf(out, "collected %d old versions: %s\n", len(deleted), strings.Join(deleted, ", "))
	}
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: collecting old versions (the deploy is done):", err)
	}
	return nil
}

func orFirst(c deploys.Current) string {
	if c.Version == "" {
		return "the first deploy"
	}
	return fmt.Sprintf("%s, seq %d", c.Version, c.Seq)
}

// draft reads and checks what the flags give: every module compiled and
// checked with each runtime of the build, as serve would load it.
func draft(ctx context.Context, warn io.Writer, reg *plugin.Registry, f deployFlags) (deploys.Draft, error) {
	var d deploys.Draft
	drivers, err := runtimes(reg)
	if err != nil {
		return d, err
	}
	check := func(what, path string) ([]byte, error) {
		for _, name := range slices.Sorted(maps.Keys(drivers)) {
			if err := node.CheckModule(ctx, drivers[name], path); err != nil {
				return nil, fmt.Errorf("%s refused (runtime %s), nothing was uploaded: %w", what, name, err)
			}
		}
		return os.ReadFile(path)
	}
	for _, s := range f.actors {
		class, path, ok := strings.Cut(s, "=")
		if !ok || class == "" || path == "" {
			return d, fmt.Errorf("--actor %q: want CLASS=FILE.wasm", s)
		}
		if d.Classes == nil {
			d.Classes = map[string][]byte{}
		}
		if _, twice := d.Classes[class]; twice {
			return d, fmt.Errorf("--actor: class %s given twice", class)
		}
		if d.Classes[class], err = check("class "+class, path); err != nil {
			return d, err
		}
	}
	switch {
	case f.frontSet && f.front == "":
		d.DropFront = true
	case f.frontSet:
		if d.Front, err = check("the front", f.front); err != nil {
			return d, err
		}
	}
	if len(f.access) > 0 {
		if d.Access, err = accessRules(nil, f.access); err != nil {
			return d, err
		}
	}
	if d.Expire, err = idleLimits(f.expire, true); err != nil {
		return d, err
	}
	for _, s := range f.configs {
		class, path, ok := strings.Cut(s, "=")
		if !ok || class == "" {
			return d, fmt.Errorf("--config %q: want CLASS=FILE (CLASS= removes the configuration)", s)
		}
		if d.Config == nil {
			d.Config = map[string]map[string]string{}
		}
		if _, twice := d.Config[class]; twice {
			return d, fmt.Errorf("--config: class %s given twice", class)
		}
		if path == "" {
			d.Config[class] = nil
			continue
		}
		vars, _, err := envfile.Parse(path)
		if err != nil {
			return d, fmt.Errorf("--config %s: %w", class, err)
		}
		d.Config[class] = vars
		warnSecrets(warn, class, vars)
	}
	for _, s := range f.requires {
		class, names, ok := strings.Cut(s, "=")
		if !ok || class == "" {
			return d, fmt.Errorf("--requires %q: want CLASS=NAME,NAME (CLASS= removes them)", s)
		}
		if d.Requires == nil {
			d.Requires = map[string][]string{}
		}
		if _, twice := d.Requires[class]; twice {
			return d, fmt.Errorf("--requires: class %s given twice", class)
		}
		d.Requires[class] = nil
		if names != "" {
			d.Requires[class] = strings.Split(names, ",")
		}
	}
	return d, nil
}

// runtimes builds every runtime plugin of the build, with its defaults.
func runtimes(reg *plugin.Registry) (map[string]runtime.Driver, error) {
	out := map[string]runtime.Driver{}
	for _, name := range reg.Names(plugin.Runtime, false) {
		in, err := reg.Lookup(plugin.Runtime, name)
		if err != nil {
			return nil, err
		}
		var cfg any
		if in.NewConfig != nil {
			cfg = in.NewConfig()
		}
		v, err := in.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", name, err)
		}
		rt, ok := v.(runtime.Driver)
		if !ok {
			return nil, fmt.Errorf("plugin %s does not implement %s", in.ID(), runtime.API)
		}
		out[name] = rt
	}
	return out, nil
}

var (
	secretName  = regexp.MustCompile(`(?i)SECRET|TOKEN|PASSWORD|PASS|KEY|CREDENTIAL|AUTH|DSN`)
	urlPassword = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@`)
)

// warnSecrets warns about values that look like secrets, naming the class
// and the variable, never the value: --config is stored in the clear.
func warnSecrets(w io.Writer, class string, vars map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		why := ""
		switch {
		case secretName.MatchString(name):
			why = "its name looks like a secret's"
		case urlPassword.MatchString(vars[name]):
			why = "its value is a URL with a password"
		default:
			continue
		}
		fmt.Fprintf(w, "warning: --config %s: %s: %s, and --config is stored in the clear in the bucket: keep secrets in the nodes' --env files\n", class, name, why)
	}
}

// listVersions prints the app's versions: current's line, newest first,
// then the others.
func listVersions(ctx context.Context, out io.Writer, b bucket.Bucket, a app.Name) error {
	cur, versions, err := deploys.List(ctx, b, a)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		fmt.Fprintf(out, "%s: nothing deployed\n", a)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tWRITTEN\tSTATUS\tCLASSES")
	for _, v := range versions {
		status, classes, written := "previous", strings.Join(slices.Sorted(maps.Keys(v.Manifest.Classes)), ","), v.Written.UTC().Format(time.RFC3339)
		switch {
		case v.Err != nil:
			status, classes, written = "unreadable: "+v.Err.Error(), "-", "-"
		case v.Current:
			status = fmt.Sprintf("current (seq %d)", cur.Seq)
		case !v.InLine:
			status = "not in current's line"
		}
		if v.Manifest.Front != "" {
			classes += " +front"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, written, status, classes)
	}
	return tw.Flush()
}

// idleLimits reads --expire-after-idle CLASS=DURATION flags; with removable,
// CLASS= removes the class's limit (0).
func idleLimits(flags []string, removable bool) (map[string]time.Duration, error) {
	var out map[string]time.Duration
	for _, s := range flags {
		class, value, ok := strings.Cut(s, "=")
		if !ok || class == "" || value == "" && !removable {
			return nil, fmt.Errorf("--expire-after-idle %q: want CLASS=DURATION", s)
		}
		if _, twice := out[class]; twice {
			return nil, fmt.Errorf("--expire-after-idle: class %s given twice", class)
		}
		var d time.Duration
		if value != "" {
			var err error
			if d, err = deploys.ParseIdle(value); err != nil {
				return nil, fmt.Errorf("--expire-after-idle %s: %w", class, err)
			}
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		out[class] = d
	}
	return out, nil
}
