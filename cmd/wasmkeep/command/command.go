// Package command is the wasmkeep command line. A custom build is a main
// package that passes the plugins it wants to Main:
//
//	func main() { os.Exit(command.Main(wazeroruntime.Info(), sqlitestorage.Info())) }
package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
	"github.com/wasmkeep/wasmkeep/kernel/transport"
)

// APIs is the contract version this kernel requires of each kind.
var APIs = map[plugin.Kind]string{
	plugin.Runtime:   runtime.API,
	plugin.Storage:   storage.API,
	plugin.Bucket:    bucket.API,
	plugin.Transport: transport.API,
}

// Main runs the command line with the given plugins and returns the exit
// code. A build holding a malformed plugin, or one built against another
// version of its kind's contract than APIs, does not start (exit status 2).
func Main(plugins ...plugin.Info) int {
	reg, err := plugin.NewRegistry(plugins...)
	if err == nil {
		err = reg.CheckAPIs(APIs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		return 2
	}
	root := &cobra.Command{
		Use:           "wasmkeep",
		Short:         "WasmKeep runs actors: addressable WebAssembly programs, each with its own SQLite database",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(reg), pluginsCommand(reg))
	root.AddCommand(benchCommand(reg))
	root.AddCommand(conformanceCommand(reg))
	root.AddCommand(versionCommand(reg))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		return 1
	}
	return 0
}

func pluginsCommand(reg *plugin.Registry) *cobra.Command {
	return &cobra.Command{
		Use:   "plugins",
		Short: "List the plugins in this build, with their kind and contract version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tNAME\tCONTRACT\tSUMMARY")
			for _, in := range reg.List() {
				summary := in.Summary
				if in.Unavailable != "" {
					summary = "not in this build: " + in.Unavailable
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.Kind, in.Name, in.API, summary)
			}
			return tw.Flush()
		},
	}
}

type serveFlags struct {
	config       string
	actors       []string
	env          []string
	dataDir      string
	listen       string
	idleTimeout  time.Duration
	cpuBudgetMS  int
	hostCPUMS    int
	maxInstances int
	guestLogRate int
	metricsAddr  string
	access       []string
	stateless    string // the positional argument

	allowOutbound      []string
	allowOutboundPorts []string
	outboundCAs        []string
}

func serveCommand(reg *plugin.Registry) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [STATELESS.wasm]",
		Short: "Serve actors over HTTP at /actor/<class>/<name>, and a stateless component at every other path",
		Example: `  wasmkeep serve --actor counter=counter.wasm
  wasmkeep serve --config plugins.yaml --actor chat=chat.wasm --listen :8080
  wasmkeep serve --actor hub=hub.wasm --env hub=/etc/wasmkeep/hub.env
  wasmkeep serve site.wasm --actor cart=cart.wasm`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.stateless = args[0]
			}
			return serve(cmd, reg, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "plugins.yaml to layer over the embedded defaults")
	fl.StringArrayVar(&f.actors, "actor", nil, "serve a class: CLASS=FILE.wasm (repeatable; node.actors)")
	fl.StringArrayVar(&f.env, "env", nil, "configuration for a class's actors: CLASS=FILE of NAME=value lines, read at start (repeatable; node.env)")
	fl.StringVar(&f.dataDir, "data-dir", "", "directory for actor databases and the compile cache (node.data_dir)")
	fl.StringVar(&f.listen, "listen", "", "address to serve HTTP on (node.listen)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", 0, "hibernate an actor after this long without events (node.idle_timeout)")
	fl.IntVar(&f.cpuBudgetMS, "cpu-budget-ms", 0, "guest CPU per event, in milliseconds (node.cpu_budget_ms)")
	fl.IntVar(&f.hostCPUMS, "host-cpu-budget-ms", 0, "CPU per event besides the guest's budget, host calls included, in milliseconds (node.host_cpu_budget_ms)")
	fl.IntVar(&f.maxInstances, "max-instances", 0, "instances at once: resident actors and stateless requests (node.max_instances)")
	fl.IntVar(&f.guestLogRate, "guest-log-rate", 50, "lines a second each actor instance may print to the log, bursts of twice that; 0 discards them (node.guest_log_rate)")
	fl.StringVar(&f.metricsAddr, "metrics-listen", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9100 (node.metrics_listen; off by default)")
	fl.StringArrayVar(&f.access, "access", nil, "who outside may reach a class's actors: CLASS=open|existing|existing:NAME,...|internal (repeatable; node.access)")
	fl.StringArrayVar(&f.allowOutbound, "allow-outbound", nil, "let guests' http_fetch reach this non-public range, e.g. 10.1.0.0/16 (repeatable; node.allow_outbound)")
	fl.StringArrayVar(&f.allowOutboundPorts, "allow-outbound-port", nil, "let guests' http_fetch reach this port, which the Fetch standard blocks (repeatable; node.allow_outbound_port)")
	fl.StringArrayVar(&f.outboundCAs, "outbound-ca", nil, "trust the CA certificates of this PEM file for guests' https fetches, besides the system roots (repeatable; node.outbound_ca)")
	return cmd
}

// nodeSettings applies the flags that were set over the loaded settings.
func nodeSettings(cmd *cobra.Command, cfg config.Node, f serveFlags) (config.Node, error) {
	set := cmd.Flags().Changed
	if set("data-dir") {
		cfg.DataDir = f.dataDir
	}
	if set("listen") {
		cfg.Listen = f.listen
	}
	if set("idle-timeout") {
		cfg.IdleTimeout = f.idleTimeout
	}
	if set("cpu-budget-ms") {
		cfg.CPUBudgetMS = f.cpuBudgetMS
	}
	if set("host-cpu-budget-ms") {
		cfg.HostCPUMS = f.hostCPUMS
	}
	if set("max-instances") {
		cfg.MaxInstances = f.maxInstances
	}
	if set("guest-log-rate") {
		cfg.GuestLogRate = &f.guestLogRate
	}
	if set("metrics-listen") {
		cfg.MetricsListen = f.metricsAddr
	}
	if len(f.actors) > 0 && cfg.Actors == nil {
		cfg.Actors = map[string]string{}
	}
	flagged := map[string]string{} // class to the file its --actor gave
	for _, a := range f.actors {
		class, file, ok := strings.Cut(a, "=")
		if !ok || class == "" || file == "" {
			return cfg, fmt.Errorf("--actor %q: want CLASS=FILE.wasm", a)
		}
		if first, twice := flagged[class]; twice {
			return cfg, fmt.Errorf("--actor %s=%s and --actor %s=%s: class %s given twice; give each class once", class, first, class, file, class)
		}
		flagged[class] = file
		cfg.Actors[class] = file
	}
	if len(cfg.Actors) == 0 && f.stateless == "" {
		return cfg, errors.New("nothing to serve: add --actor CLASS=FILE.wasm (or node.actors in the config), or a stateless component")
	}
	rate := 0
	if cfg.GuestLogRate != nil {
		rate = *cfg.GuestLogRate
	}
	for _, s := range []struct {
		key      string // node.<key>, whose flag is --<key> with dashes
		value    any
		negative bool
	}{
		{"cpu_budget_ms", cfg.CPUBudgetMS, cfg.CPUBudgetMS < 0},
		{"host_cpu_budget_ms", cfg.HostCPUMS, cfg.HostCPUMS < 0},
		{"max_instances", cfg.MaxInstances, cfg.MaxInstances < 0},
		{"idle_timeout", cfg.IdleTimeout, cfg.IdleTimeout < 0},
		{"guest_log_rate", rate, rate < 0},
	} {
		if s.negative {
			return cfg, fmt.Errorf("node.%s (--%s) is %v: it cannot be negative", s.key, strings.ReplaceAll(s.key, "_", "-"), s.value)
		}
	}
	return cfg, nil
}

// accessRules parses --access, then node.access for the classes no flag
// names: a flag overrides the file class by class.
func accessRules(file map[string]string, flags []string) (map[string]node.Access, error) {
	rules := map[string]node.Access{}
	for _, s := range flags {
		class, mode, ok := strings.Cut(s, "=")
		if !ok || class == "" {
			return nil, fmt.Errorf("--access %q: want CLASS=MODE", s)
		}
		a, err := node.ParseAccess(mode)
		if err != nil {
			return nil, fmt.Errorf("--access %q: %w", s, err)
		}
		rules[class] = a
	}
	for class, mode := range file {
		if _, set := rules[class]; set {
			continue
		}
		a, err := node.ParseAccess(mode)
		if err != nil {
			return nil, fmt.Errorf("node.access.%s: %w", class, err)
		}
		rules[class] = a
	}
	return rules, nil
}

func serve(cmd *cobra.Command, reg *plugin.Registry, f serveFlags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := config.Load(wasmkeep.DefaultConfig, f.config, os.Environ(), reg, APIs)
	if err != nil {
		return err
	}
	ns, err := nodeSettings(cmd, cfg.Node, f)
	if err != nil {
		return err
	}
	access, err := accessRules(ns.Access, f.access)
	if err != nil {
		return err
	}
	env, err := readEnv(f.env, ns.Env, ns.Actors, log)
	if err != nil {
		return err
	}
	rtAny, err := cfg.Plugins[plugin.Runtime].New()
	if err != nil {
		return err
	}
	stAny, err := cfg.Plugins[plugin.Storage].New()
	if err != nil {
		return err
	}
	rt, ok := rtAny.(runtime.Driver)
	if !ok {
		return fmt.Errorf("plugin %s does not implement %s", cfg.Plugins[plugin.Runtime].Info.ID(), runtime.API)
	}
	st, ok := stAny.(storage.Driver)
	if !ok {
		return fmt.Errorf("plugin %s does not implement %s", cfg.Plugins[plugin.Storage].Info.ID(), storage.API)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := node.Options{
		DataDir:       ns.DataDir,
		Classes:       ns.Actors,
		Access:        access,
		Env:           env,
		Stateless:     f.stateless,
		IdleTimeout:   ns.IdleTimeout,
		CPUBudget:     time.Duration(ns.CPUBudgetMS) * time.Millisecond,
		HostCPUBudget: time.Duration(ns.HostCPUMS) * time.Millisecond,
		MaxInstances:  ns.MaxInstances,
		GuestLogRate:  guestLogRate(ns.GuestLogRate),
		Logger:        log,
	}
	if err := outbound(&opts, cmd.Flags().Changed, ns, f); err != nil {
		return err
	}
	n, err := node.New(ctx, opts, rt, st)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", ns.Listen)
	if err != nil {
		n.Close()
		return err
	}
	srv := n.NewServer(ns.Listen)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	if ns.MetricsListen != "" {
		ml, err := net.Listen("tcp", ns.MetricsListen)
		if err != nil {
			n.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		// The page names classes and counts events: bind it where only
		// Prometheus reaches.
		go (&http.Server{Handler: n.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}).Serve(ml)
		log.Info("metrics", "listen", ml.Addr().String())
	}
	rtChoice, stChoice := cfg.Plugins[plugin.Runtime], cfg.Plugins[plugin.Storage]
	log.Info("serving", "listen", l.Addr().String(), "runtime", rtChoice.Info.Name, "storage", stChoice.Info.Name,
		slog.GroupAttrs(rtChoice.Info.ID(), rtChoice.Settings()...), slog.GroupAttrs(stChoice.Info.ID(), stChoice.Settings()...),
		"data_dir", ns.DataDir)
	select {
	case <-ctx.Done():
		log.Info("stopping: finishing in-flight requests and queued events")
	case err := <-errc:
		n.Close()
		return err
	}
	err = n.Shutdown(srv, 10*time.Second)
	log.Info("stopped")
	return err
}

// guestLogRate maps node.guest_log_rate to node.Options, where 0 is the
// default and discarding is DiscardGuestLogs.
func guestLogRate(rate *int) int {
	switch {
	case rate == nil:
		return 0
	case *rate == 0:
		return node.DiscardGuestLogs
	}
	return *rate
}
