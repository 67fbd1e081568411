package command

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/bench/measure"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

type benchFlags struct {
	engines     []string
	actor       string
	read, write string
	config      string
	quick       bool
	out         string
}

func benchCommand(reg *plugin.Registry) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare runtime engines serving one actor class, side by side, with ratios",
		Long: `bench measures this binary serving one actor class on each engine in turn:
it starts "wasmkeep serve" as a child process per engine, one after another,
and measures start-up, the first request to a new actor, read and write
latency, memory per resident actor, throughput and server CPU per request
(bench/README.md in the repository defines each row). It prints one table,
engines side by side with each engine's ratio to the first, and writes the
rows to <out>/<date>-<commit>-engines-<engines>.csv. Linux only.

The actor must answer both requests with a 2xx status (200, 201, 204...),
to any actor name.`,
		Example: `  wasmkeep bench --actor counter=counter.wasm
  wasmkeep bench --engines wazero,wasmtime --quick --actor counter=counter.wasm
  wasmkeep bench --actor chat=chat.wasm --read 'GET /actor/chat/{name}/history' --write 'POST /actor/chat/{name} hello'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench(cmd, reg, f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.engines, "engines", nil, "runtime plugins to compare, in order; ratios are to the first (default: every runtime in this build, the configured one first)")
	fl.StringVar(&f.actor, "actor", "", "the class to measure: CLASS=FILE.wasm (required)")
	fl.StringVar(&f.read, "read", "", `request of the read rows, "METHOD PATH [BODY]", {name} standing for the actor (default "GET /actor/CLASS/{name}")`)
	fl.StringVar(&f.write, "write", "", `request of the write rows, like --read (default "POST /actor/CLASS/{name}")`)
	fl.StringVar(&f.config, "config", "", "plugins.yaml for every server; each engine overrides its runtime.use")
	fl.BoolVar(&f.quick, "quick", false, "small counts: checks that the actor and requests work, measures nothing worth keeping")
	fl.StringVar(&f.out, "out", ".", "directory for the CSV")
	cmd.MarkFlagRequired("actor")
	return cmd
}

func bench(cmd *cobra.Command, reg *plugin.Registry, f benchFlags) error {
	// Loaded as serve would load it: to check it before any server starts,
	// and to know which engine is the configured one.
	cfg, err := config.Load(wasmkeep.DefaultConfig, f.config, os.Environ(), reg, APIs)
	if err != nil {
		return err
	}
	engines, err := benchEngines(reg, cfg.Plugins[plugin.Runtime].Info.Name, f.engines)
	if err != nil {
		return err
	}
	opts := measure.Options{Quick: f.quick, Progress: cmd.ErrOrStderr()}
	var srv measure.Wasmkeep
	class, file, ok := strings.Cut(f.actor, "=")
	if !ok || class == "" || file == "" {
		return fmt.Errorf("--actor %q: want CLASS=FILE.wasm", f.actor)
	}
	// Checked here, or each server would fail on it in turn.
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("--actor: %w", err)
	}
	opts.Class, opts.Guest = class, class
	srv.Class, srv.Guest = class, file
	if f.config != "" {
		srv.ServeArgs = []string{"--config", f.config}
	}
	if f.read != "" {
		if opts.Read, err = measure.ParseRequest(f.read); err != nil {
			return fmt.Errorf("--read: %w", err)
		}
	}
	if f.write != "" {
		if opts.Write, err = measure.ParseRequest(f.write); err != nil {
			return fmt.Errorf("--write: %w", err)
		}
	}
	// The servers are this binary, so the build measured is this one.
	if srv.Binary, err = os.Executable(); err != nil {
		return err
	}

	var results []measure.Result
	// One engine at a time: servers measured side by side would share the
	// cores and each measure the other.
	for _, engine := range engines {
		fmt.Fprintf(cmd.ErrOrStderr(), "engine %s:\n", engine)
		srv.Env = []string{config.EnvPrefix + "RUNTIME__USE=" + engine}
		opts.Server = srv
		res, err := measure.Run(opts)
		if err != nil {
			return fmt.Errorf("engine %s: %w", engine, err)
		}
		if res.Engine != engine {
			return fmt.Errorf("asked for engine %s, but the server served with %s", engine, res.Engine)
		}
		results = append(results, res)
	}
	measure.PrintTable(cmd.OutOrStdout(), results...)
	path, err := measure.WriteCSV(f.out, readBuild().label(), "-engines-"+strings.Join(engines, "-"), results...)
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), "wrote", path)
	return nil
}

// benchEngines checks the engines asked for, or lists every runtime in the
// build with the configured one first, as the baseline of the ratios.
func benchEngines(reg *plugin.Registry, configured string, asked []string) ([]string, error) {
	if len(asked) == 0 {
		others := slices.DeleteFunc(reg.Names(plugin.Runtime, false), func(n string) bool { return n == configured })
		return append([]string{configured}, others...), nil
	}
	for i, e := range asked {
		if _, err := reg.Lookup(plugin.Runtime, e); err != nil {
			return nil, fmt.Errorf("--engines: %w", err)
		}
		if slices.Contains(asked[:i], e) {
			return nil, fmt.Errorf("--engines: %s twice", e)
		}
	}
	return asked, nil
}
