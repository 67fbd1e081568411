package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

func conformanceCommand(reg *plugin.Registry) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "conformance",
		Short: "Check that a configured provider keeps its contract",
	}, 1)
	cmd.AddCommand(conformanceBucketCommand(reg), conformanceTransportCommand(reg))
	return cmd
}

type conformanceFlags struct {
	config  string
	base    string
	opts    buckettest.Options
	cluster clusterFlags // --bucket
}

func conformanceBucketCommand(reg *plugin.Registry) *cobra.Command {
	var f conformanceFlags
	cmd := &cobra.Command{
		Use:   "bucket",
		Short: "Run the bucket conformance suite against the configured bucket (bucket.use)",
		Long: `Run the bucket conformance suite (conformance/buckettest) against the bucket
that plugins.yaml chooses, loaded as serve loads it (the embedded defaults,
--config, then WASMKEEP_* variables, then --bucket), and print each rule passed or failed,
and each capability the suite reports but WasmKeep does not need (a
conditional delete, byte order across /) present or lacking. The run writes
under --prefix plus a name of its own, deletes what it wrote, and exits with
status 1 if any rule failed, or at once, saying why, if the bucket cannot be
listed at all. The bucket must be one a node may write to: the start-time
probe writes (and deletes) under probe/.`,
		Example: `  wasmkeep conformance bucket --config s3.yaml
  wasmkeep conformance bucket --bucket s3://my-bucket/prod --quick
  WASMKEEP_BUCKET__USE=fs WASMKEEP_BUCKET__FS__DIR=/tmp/b wasmkeep conformance bucket --quick`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return conformanceBucket(cmd, reg, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults")
	f.cluster.bind(fl, false) // --bucket, as the other bucket commands take it
	fl.StringVar(&f.base, "prefix", "buckettest/", "where in the bucket the run writes (under a name of its own); ends in /")
	fl.IntVar(&f.opts.Writers, "writers", 0, "writers racing on one create and one replace (default 16, --quick 4)")
	fl.IntVar(&f.opts.Rounds, "rounds", 0, "rounds of each race (default 20, --quick 3)")
	fl.IntVar(&f.opts.ListKeys, "list-keys", 0, "keys the listing rule writes (default 2500, --quick 300)")
	fl.Int64Var(&f.opts.LargeSize, "large-size", 0, "bytes of the large object (default 64 MiB, --quick 4 MiB)")
	fl.DurationVar(&f.opts.Timeout, "timeout", 5*time.Minute, "time each rule may take")
	fl.BoolVar(&f.opts.Quick, "quick", false, "smaller counts: every rule, on less data")
	return cmd
}

func conformanceBucket(cmd *cobra.Command, reg *plugin.Registry, f conformanceFlags) error {
	b, ch, err := chosenBucket(reg, f.config, f.cluster.layers(cmd.Flags())...)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	f.opts.Prefix = buckettest.NewPrefix(f.base)
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "bucket plugin %s (%s), writing under %s\n", ch.Info.Name, ch.Info.API, f.opts.Prefix)
	var names []string
	for _, r := range buckettest.Rules() {
		names = append(names, r.Name)
	}
	lines := ruleLines{out: out, names: names}
	failed, capabilities := 0, 0
	var lacking []string
	// A line as each rule ends: the large and racing rules take a while.
	results, err := buckettest.Check(ctx, b, f.opts, func(r buckettest.Result) {
		status, why := "passed", r.Summary
		if r.Rule.Capability {
			capabilities++
		}
		switch {
		case r.Failed():
			status, why = "FAILED", r.Err.Error()
			failed++
		case r.Err != nil:
			status, why = "lacks", fmt.Sprintf("%v (WasmKeep does not need it: %s)", r.Err, r.Rule.Without)
			lacking = append(lacking, r.Rule.Name)
		case r.Rule.Capability:
			status = "has"
		}
		lines.print(status, r.Rule.Name, r.Elapsed, why)
	})
	if errors.Is(err, buckettest.ErrUnusable) {
		return fmt.Errorf("bucket plugin %s: %w (after %d of %d checks)", ch.Info.Name, err, len(results), len(buckettest.Rules()))
	}
	if err != nil {
		return err
	}
	rules := len(results) - capabilities
	fmt.Fprintf(out, "%d rules: %d passed, %d failed\n", rules, rules-failed, failed)
	fmt.Fprintf(out, "%d capabilities: %d present", capabilities, capabilities-len(lacking))
	if len(lacking) > 0 {
		fmt.Fprintf(out, ", lacking %s, which WasmKeep does not need", strings.Join(lacking, " and "))
	}
	fmt.Fprintln(out)
	if failed > 0 {
		return fmt.Errorf("bucket plugin %s failed %d of %d conformance rules", ch.Info.Name, failed, rules)
	}
	return nil
}

// ruleLines prints a conformance run's line per rule, as each ends, the
// names in a column as wide as the longest.
type ruleLines struct {
	out   io.Writer
	names []string
}

func (l ruleLines) print(status, name string, elapsed time.Duration, why string) {
	width := 0
	for _, n := range l.names {
		width = max(width, len(n))
	}
	fmt.Fprintf(l.out, "%-6s  %-*s %7.2fs  %s\n", status, width, name, elapsed.Seconds(), why)
}

// chosen loads the configuration (plugins.yaml at path over the embedded
// defaults, the environment, then flags) and returns it with the plugin it
// chooses for kind (the configuration is nil if it did not load).
func chosen(reg *plugin.Registry, kind plugin.Kind, path string, flags ...config.Flag) (*config.Config, config.Choice, error) {
	cfg, err := config.Load(wasmkeep.DefaultConfig, path, os.Environ(), reg, APIs, flags...)
	if err != nil {
		return nil, config.Choice{}, err
	}
	ch, err := cfg.Plugin(kind)
	return cfg, ch, err
}

// chosenBucket opens the bucket the configuration chooses (chosen).
func chosenBucket(reg *plugin.Registry, path string, flags ...config.Flag) (bucket.Bucket, config.Choice, error) {
	b, _, ch, err := chosenConfig(reg, path, flags...)
	return b, ch, err
}

// chosenConfig is chosenBucket with the configuration it loaded (the
// cluster: timings, for the cluster commands).
func chosenConfig(reg *plugin.Registry, path string, flags ...config.Flag) (bucket.Bucket, *config.Config, config.Choice, error) {
	cfg, ch, err := chosen(reg, plugin.Bucket, path, flags...)
	if err != nil {
		return nil, cfg, ch, err
	}
	b, err := openBucket(ch)
	return b, cfg, ch, err
}

// openBucket builds the chosen bucket plugin.
func openBucket(ch config.Choice) (bucket.Bucket, error) {
	v, err := ch.New()
	if err != nil {
		return nil, err
	}
	b, ok := v.(bucket.Bucket)
	if !ok {
		return nil, errors.New("plugin " + ch.Info.ID() + " does not implement " + bucket.API)
	}
	return b, nil
}
