package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep/conformance/transporttest"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

type conformanceTransportFlags struct {
	config string
	opts   transporttest.Options
}

func conformanceTransportCommand(reg *plugin.Registry) *cobra.Command {
	var f conformanceTransportFlags
	cmd := &cobra.Command{
		Use:   "transport",
		Short: "Run the transport conformance suite against the configured transport (transport.use)",
		Long: `Run the transport conformance suite (conformance/transporttest) against the
transport plugin that plugins.yaml chooses, loaded as serve loads it (the
embedded defaults, --config, then WASMKEEP_* variables), and print each rule
passed or failed. Each rule builds nodes of its own from the plugin (each a
new identity) and connects them on 127.0.0.1 only: nothing leaves the
machine. A transport plugin must authenticate its peers (a pin); the exit
status is 1 if any rule failed.`,
		Example: `  wasmkeep conformance transport
  wasmkeep conformance transport --config plugins.yaml --rounds 100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return conformanceTransport(cmd, reg, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults")
	fl.DurationVar(&f.opts.Wait, "wait", 5*time.Second, "how long to wait for what should happen at once (a cut connection's Read to return)")
	fl.IntVar(&f.opts.Rounds, "rounds", 20, "rounds of the rule racing Trust with handshakes")
	fl.DurationVar(&f.opts.Timeout, "timeout", time.Minute, "time each rule may take")
	return cmd
}

func conformanceTransport(cmd *cobra.Command, reg *plugin.Registry, f conformanceTransportFlags) error {
	_, ch, err := chosen(reg, plugin.Transport, f.config)
	if err != nil {
		return err
	}
	newTransport := func() (transport.Transport, error) {
		v, err := ch.New()
		if err != nil {
			return nil, err
		}
		tr, ok := v.(transport.Transport)
		if !ok {
			return nil, errors.New("plugin " + ch.Info.ID() + " does not implement " + transport.API)
		}
		return tr, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "transport plugin %s (%s), nodes on 127.0.0.1\n", ch.Info.Name, ch.Info.API)
	var names []string
	for _, r := range transporttest.Rules() {
		names = append(names, r.Name)
	}
	lines := ruleLines{out: out, names: names}
	failed := 0
	results, err := transporttest.Check(ctx, newTransport, f.opts, func(r transporttest.Result) {
		status, why := "passed", r.Rule.Summary
		if r.Failed() {
			status, why = "FAILED", r.Err.Error()
			failed++
		}
		lines.print(status, r.Rule.Name, r.Elapsed, why)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d rules: %d passed, %d failed\n", len(results), len(results)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("transport plugin %s failed %d of %d conformance rules", ch.Info.Name, failed, len(results))
	}
	return nil
}
