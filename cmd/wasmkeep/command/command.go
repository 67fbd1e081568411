// Package command is the wasmkeep command line. A custom build is a main
// package that passes the plugins it wants to Main:
//
//	func main() { os.Exit(command.Main(wazeroruntime.Info(), sqlitestorage.Info())) }
package command

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/net/netutil"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
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
	defaults, err := config.NodeDefaults(wasmkeep.DefaultConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		return 2
	}
	root := &cobra.Command{
		Use:           "wasmkeep",
		Short:         "WasmKeep runs actors: addressable WebAssembly programs, each with its own SQLite database",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       readBuild().version, // --version; `wasmkeep version` says more
	}
	root.AddCommand(serveCommand(reg, defaults), pluginsCommand(reg))
	root.AddCommand(benchCommand(reg))
	root.AddCommand(conformanceCommand(reg))
	root.AddCommand(versionCommand(reg))
	root.AddCommand(bucketCommand(reg))
	root.AddCommand(clusterCommand(reg))
	root.AddCommand(actorCommand(reg))
	root.AddCommand(appCommand(reg))
	root.AddCommand(deployCommand(reg))
	root.AddCommand(secretsCommand(reg))
	if err := root.Execute(); err != nil {
		var ee *exitErr
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "wasmkeep:", ee.err)
			}
			return ee.code
		}
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		return 1
	}
	return 0
}

// group makes cmd, a command of subcommands, refuse an unknown one with
// the exit status code: left to cobra, `wasmkeep cluster move b` prints the
// help and succeeds, and a script takes it for done. Alone it prints its
// help.
func group(cmd *cobra.Command, code int) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return &exitErr{code, fmt.Errorf("%s; run '%s --help' for its commands", msg, cmd.CommandPath())}
	}
	return cmd
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
	config    string
	app       string
	actors    []string
	env       []string
	access    []string
	expire    []string
	stateless string // the positional argument

	// node holds the flags of node's settings (config.NodeFields), each
	// defaulting to the embedded plugins.yaml's value.
	node config.Node

	allowOutbound      []string
	allowOutboundPorts []string
	outboundCAs        []string
	secretsKeys        []string
	noSecrets          bool
	pprof              bool
	accessLog          bool

	cluster clusterFlags
}

func serveCommand(reg *plugin.Registry, defaults config.Node) *cobra.Command {
	f := serveFlags{node: defaults}
	cmd := &cobra.Command{
		Use:   "serve [STATELESS.wasm]",
		Short: "Serve actors over HTTP at /actor/<class>/<name>, and a stateless component at every other path",
		Long: `Serve actors over HTTP at /actor/<class>/<name>, and a stateless component at
every other path. Each setting comes from, last wins: the embedded
plugins.yaml (the defaults shown below), --config, a WASMKEEP_NODE__<KEY>
variable, then its flag. A flag's key is its name with underscores under
node: (--max-instances is node.max_instances).`,
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
	fl.StringVar(&f.app, "app", "", "serve as this app, TENANT/APP, whose actors' state is its own in the bucket; needs --bucket (default: default/default; node.app)")
	fl.StringArrayVar(&f.actors, "actor", nil, "serve a class: CLASS=FILE.wasm (repeatable; node.actors)")
	fl.StringArrayVar(&f.env, "env", nil, "configuration for a class's actors: CLASS=FILE of NAME=value lines, read at start (repeatable; node.env)")
	for key, field := range config.NodeFields(&f.node) {
		nodeFlag(fl, key, field)
	}
	fl.StringArrayVar(&f.access, "access", nil, "who outside may reach a class's actors: CLASS=open|existing|existing:NAME,...|internal (repeatable; node.access)")
	fl.StringArrayVar(&f.expire, "expire-after-idle", nil, "with a bucket, delete an --actor class's actors idle this long: CLASS=DURATION (3600s, 90m, 36h, 7d; at least 1h; repeatable); a deployed app says it in its version (deploy --expire-after-idle)")
	fl.StringArrayVar(&f.allowOutbound, "allow-outbound", nil, "let guests' http_fetch reach this non-public range, e.g. 10.1.0.0/16 (repeatable; node.allow_outbound)")
	fl.StringArrayVar(&f.allowOutboundPorts, "allow-outbound-port", nil, "let guests' http_fetch reach this port, which the Fetch standard blocks (repeatable; node.allow_outbound_port)")
	fl.StringArrayVar(&f.outboundCAs, "outbound-ca", nil, "trust the CA certificates of this PEM file for guests' https fetches, besides the system roots (repeatable; node.outbound_ca)")
	fl.StringArrayVar(&f.secretsKeys, "secrets-key", nil, "with a bucket: a key file that opens the app's secrets in it (mode 0600; give the old and the new key during a rotation; node.secrets_key)")
	fl.BoolVar(&f.noSecrets, "no-secrets", false, "with a bucket: run without the app's secrets in it, with --env only (node.no_secrets)")
	fl.BoolVar(&f.accessLog, "access-log", false, "log a line for each request on the public listener: its actor, status, duration and the node that answered (node.access_log)")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the metrics listener; needs --metrics-listen (node.pprof)")
	f.cluster.bind(fl, true)
	return cmd
}

// nodeFlag defines the flag of a node setting, bound to the field, with the
// field's value (the embedded default) as the flag's default.
func nodeFlag(fl *pflag.FlagSet, key string, field config.NodeField) {
	name, usage := config.FlagName(key), field.Help+" (node."+key+")"
	switch p := field.Ptr.(type) {
	case *string:
		fl.StringVar(p, name, *p, usage)
	case *int:
		fl.IntVar(p, name, *p, usage)
	case *int64:
		fl.Int64Var(p, name, *p, usage)
	case *time.Duration:
		fl.DurationVar(p, name, *p, usage)
	case **int:
		if *p == nil {
			*p = new(int)
		}
		fl.IntVar(*p, name, **p, usage)
	default:
		panic(fmt.Sprintf("node.%s: no flag for a %T", key, p))
	}
}

// nodeFlags are the node flags that were given, as configuration layers
// over the file and the environment.
func nodeFlags(cmd *cobra.Command, f serveFlags) []config.Flag {
	var out []config.Flag
	for key, field := range config.NodeFields(&f.node) {
		name := config.FlagName(key)
		if !cmd.Flags().Changed(name) {
			continue
		}
		var v any
		switch p := field.Ptr.(type) {
		case *time.Duration:
			v = p.String() // plugins.yaml's form: a number alone is refused
		case **int:
			v = **p
		default:
			v = reflect.ValueOf(p).Elem().Interface()
		}
		out = append(out, config.Flag{Name: "--" + name, Key: "node." + key, Value: v})
	}
	return out
}

// nodeSettings adds the --app and --actor flags to the loaded settings and
// checks that there is something to serve.
func nodeSettings(cfg config.Node, f serveFlags) (config.Node, error) {
	if f.app != "" {
		cfg.App = f.app
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
	if len(cfg.Actors) == 0 && f.stateless == "" && cfg.App == "" {
		return cfg, errors.New("nothing to serve: add --actor CLASS=FILE.wasm (or node.actors in the config), a stateless component, or --app TENANT/APP to serve what wasmkeep deploy put in the bucket")
	}
	return cfg, nil
}

// servedApp is the app --app (node.app) names, which needs a bucket to keep
// its state apart from other apps', or default/default without one.
func servedApp(name, bucket string) (app.Name, error) {
	if name == "" {
		return app.Default, nil
	}
	a, err := app.Parse(name)
	if err != nil {
		return a, fmt.Errorf("--app (node.app): %w", err)
	}
	if bucket == "" {
		return a, fmt.Errorf("--app %s needs a bucket (--bucket): an app is served from a cluster's bucket", a)
	}
	return a, nil
}

// accessRules parses --access, then node.access for the classes no flag
// names: a flag overrides the file class by class.
func accessRules(file map[string]string, flags []string) (map[string]access.Access, error) {
	rules := map[string]access.Access{}
	for _, s := range flags {
		class, mode, ok := strings.Cut(s, "=")
		if !ok || class == "" {
			return nil, fmt.Errorf("--access %q: want CLASS=MODE", s)
		}
		if _, twice := rules[class]; twice { // which one was meant?
			return nil, fmt.Errorf("--access: class %s given twice", class)
		}
		a, err := access.Parse(mode)
		if err != nil {
			return nil, fmt.Errorf("--access %q: %w", s, err)
		}
		rules[class] = a
	}
	for class, mode := range file {
		if _, set := rules[class]; set {
			continue
		}
		a, err := access.Parse(mode)
		if err != nil {
			return nil, fmt.Errorf("node.access.%s: %w", class, err)
		}
		rules[class] = a
	}
	return rules, nil
}

func serve(cmd *cobra.Command, reg *plugin.Registry, f serveFlags) (err error) {
	// With --log-format json the error that ends serve is a JSON line too
	// (a log shipper never sees a plain one); until the settings are read,
	// the format is the flag's or the variable's.
	format := cmp.Or(os.Getenv("WASMKEEP_NODE__LOG_FORMAT"), f.node.LogFormat)
	if cmd.Flags().Changed("log-format") {
		format = f.node.LogFormat
	}
	var log *slog.Logger // the node's, once its settings are read
	defer func() {
		if err != nil && format == "json" {
			if log == nil {
				log = newLogger(cmd.ErrOrStderr(), format, "error")
			}
			log.Error("the node stopped on an error", "err", err)
			err = &exitErr{code: 1}
		}
	}()
	flags := append(nodeFlags(cmd, f), f.cluster.layers(cmd.Flags())...)
	cfg, err := config.Load(wasmkeep.DefaultConfig, f.config, os.Environ(), reg, APIs, flags...)
	if err != nil {
		return err
	}
	ns, err := nodeSettings(cfg.Node, f)
	if err != nil {
		return err
	}
	format = ns.LogFormat
	served, err := servedApp(ns.App, cfg.Cluster.Bucket)
	if err != nil {
		return err
	}
	log = newLogger(cmd.ErrOrStderr(), ns.LogFormat, ns.LogLevel)
	if id := cfg.Cluster.NodeID; id != "" && cfg.Cluster.Bucket != "" {
		log = slog.New(namingNode{log.Handler(), id, nil}) // every line of a cluster's node says which
	}
	// Plugins, and anything else that logs with slog's default, log as
	// the node does.
	slog.SetDefault(log)
	// First of all: it may run the process again, which must have read
	// nothing that cannot be read twice (a pipe of --secrets-key).
	hugePages := useHeap(ns.CHeapHugePages, cfg.Plugins, log)
	access, err := accessRules(ns.Access, f.access)
	if err != nil {
		return err
	}
	expire, err := idleLimits(f.expire, false)
	if err != nil {
		return err
	}
	if len(expire) > 0 && cfg.Cluster.Bucket == "" {
		return errors.New("--expire-after-idle needs a bucket (--bucket): an actor's idle time is read from its ownership record there")
	}
	keyFiles := flagOrKey(cmd.Flags().Changed, "secrets-key", f.secretsKeys, ns.SecretsKey)
	noSecrets := ns.NoSecrets
	if cmd.Flags().Changed("no-secrets") {
		noSecrets = f.noSecrets
	}
	profiler, logRequests := ns.Pprof, ns.AccessLog
	if cmd.Flags().Changed("pprof") {
		profiler = f.pprof
	}
	if cmd.Flags().Changed("access-log") {
		logRequests = f.accessLog
	}
	if profiler && ns.MetricsListen == "" {
		return errors.New("node.pprof (--pprof) needs node.metrics_listen (--metrics-listen): the profiler is served there, never on the public listener")
	}
	keys, err := secretsKeys(keyFiles, noSecrets, cfg.Cluster.Bucket != "")
	if err != nil {
		return err
	}
	// Without a bucket the classes are the node's own, known now; with
	// one, the app's version may give them (followApp).
	var env map[string]map[string]string
	if cfg.Cluster.Bucket == "" {
		if env, err = readEnv(f.env, ns.Env, ns.Actors, false, log); err != nil {
			return err
		}
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
	// Before anything touches the data directory or the bucket: a second
	// process on this directory is refused here, naming the first.
	dirLock, err := lockDataDir(ns.DataDir, ns.Listen)
	if err != nil {
		return err
	}
	defer dirLock.release()
	// The public listener is bound first, served last: --listen with port
	// 0 takes a port nothing else holds (the cluster listener's own port 0
	// cannot take it), and the URL peers are given names the port bound.
	l, err := net.Listen("tcp", ns.Listen)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := dirLock.note(l.Addr().String()); err != nil {
		log.Warn("noting the listener in the data directory's lock file", "err", err)
	}
	// SIGHUP stops cleanly too: a node has no configuration to reload, and
	// the default (exit at once) would leave its actors to a takeover.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// With a bucket the node joins its cluster before it serves: a second
	// process with this node id is refused here, having taken nothing (its
	// listener bound, nothing accepted).
	var cn *clusterNode
	lost := make(chan error, 1)
	if cfg.Cluster.Bucket != "" {
		cn, err = joinCluster(ctx, cfg, served, boundURL(ns.Listen, l.Addr()), !noSecrets, log, func(err error) { lost <- err })
		if err != nil {
			return err
		}
		defer cn.close()
		watch, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go cn.Member.WatchPeers(watch)
		go cn.Peers.Run(watch)
		// Leaving releases the holds and the lease, so peers may take the
		// actors at once; a lost lease is not this process's to release.
		defer func() {
			if len(lost) == 0 {
				leaveCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := cn.Member.Leave(leaveCtx); err != nil {
					log.Warn("leaving the cluster", "err", err)
				}
			}
		}()
	}
	opts := limits(ns)
	opts.DataDir, opts.CacheDir = ns.DataDir, ns.CacheDir
	if opts.CacheDir == "" {
		// The machine's cache: a fresh data directory starts without
		// compiling what a node of this machine compiled before (ADR 1058).
		var why error
		if opts.CacheDir, why = node.MachineCacheDir(); why != nil {
			log.Warn("no cache directory for the machine: the compile cache is kept in the data directory", "err", why)
		}
	}
	own := ownClasses{actors: ns.Actors, access: access, expire: expire, stateless: f.stateless}
	var fol *follower
	var sec *nodeSecrets
	if cn != nil {
		deployed := false
		if fol, deployed, err = followApp(ctx, cn, served, ns.App != "", &opts, own, cfg.Cluster.Lease().Period(), log); err != nil {
			return err
		}
		if !noSecrets {
			if sec, err = followSecrets(ctx, cn, served, keys, cfg.Cluster.Lease().Period(), &opts, log); err != nil {
				return err
			}
		}
		if env, err = readEnv(f.env, ns.Env, opts.Classes, deployed, log); err != nil {
			return err
		}
	} else {
		own.serve(&opts)
	}
	opts.Env = env
	files, err := openFiles()
	if err != nil {
		return fmt.Errorf("reading the open-files limit: %w", err)
	}
	maxConns := ns.MaxConnections
	if maxConns == 0 {
		maxConns = node.DefaultMaxConnections
	}
	fit := fitOpenFiles(files, cn != nil && cn.listener != nil, maxConns, opts.WithDefaults().MaxInstances)
	if fit.lowered {
		log.Warn("the open-files limit lowers the connections and resident actors: raise it (LimitNOFILE, ulimit -n)",
			"open_files", files, "max_connections", fit.connections, "max_instances", fit.instances)
	}
	opts.MaxInstances, opts.MaxConnections = fit.instances, fit.connections
	opts.App, opts.Logger = served, log
	rtChoice, stChoice := cfg.Plugins[plugin.Runtime], cfg.Plugins[plugin.Storage]
	b := readBuild()
	opts.Build = metrics.Build{Version: b.version, Commit: b.commit, GoVersion: b.goVer, Runtime: rtChoice.Info.Name, Storage: stChoice.Info.Name}
	if cn != nil {
		opts.Cluster = cn.Cluster
	}
	if err := outbound(&opts, cmd.Flags().Changed, ns, f); err != nil {
		return err
	}
	n, err := node.New(ctx, opts, rt, st)
	if err != nil {
		return err
	}
	if sec != nil {
		// Read again before the node serves: the set opened before its
		// classes compiled may have been replaced (revoked) since.
		sec.node = n
		sec.Start(ctx)
		go sec.Run(ctx)
	}
	if cn != nil {
		cn.node.Store(n)
	}
	// The follower stops before the node does: no version is applied to a
	// node shutting down.
	stopFollowing := func() {}
	if fol != nil {
		var follow context.Context
		follow, stopFollowing = context.WithCancel(ctx)
		defer stopFollowing()
		go fol.run(follow, n)
	}
	if ns.MetricsListen != "" {
		ml, err := net.Listen("tcp", ns.MetricsListen)
		if err != nil {
			n.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		// The page names classes and counts events: bind it where only
		// Prometheus reaches. Bound before the node serves, so that a
		// scrape after the node is ready finds it.
		go (&http.Server{Handler: metricsMux(n.MetricsHandler(), profiler), ReadHeaderTimeout: 10 * time.Second}).Serve(ml)
		log.Info("metrics", "listen", ml.Addr().String(), "pprof", profiler)
	}
	// Past the cap a connection waits in the kernel's backlog (the book),
	// not refused: it is served once another closes.
	l = netutil.LimitListener(l, fit.connections)
	srv := n.NewServer(ns.Listen)
	if logRequests {
		srv.Handler = accessLog(srv.Handler, log)
	}
	errc := make(chan error, 1)
	if cn != nil && cn.listener != nil {
		csrv := cn.Peers.ClusterServer(n)
		// Not capped by a wrapper: the transport knows a peer by the very
		// connection it accepted (PeerOf), which a wrapper would hide; its
		// share of the open files is kept in the fit all the same, and it
		// serves only peers whose pins a live lease names.
		go func() { errc <- csrv.Serve(cn.listener) }()
		defer csrv.Close()
		log.Info("cluster listener", "listen", cn.listener.Addr().String())
	}
	// Logged before the public listener serves, so that whoever sees the
	// node ready finds the line (a test killed it between the two).
	log.Info("serving", "listen", l.Addr().String(), "runtime", rtChoice.Info.Name, "storage", stChoice.Info.Name,
		slog.GroupAttrs(rtChoice.Info.ID(), rtChoice.Settings()...), slog.GroupAttrs(stChoice.Info.ID(), stChoice.Settings()...),
		"app", served.String(), "data_dir", ns.DataDir, "cache_dir", opts.WithDefaults().CacheDir, "open_files", files, "max_connections", fit.connections, "max_instances", fit.instances,
		"c_heap_huge_pages", hugePages)
	go func() { errc <- srv.Serve(l) }()
	go notifyReady(ctx, n, log)
	var stopErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: finishing in-flight requests and queued events")
	case <-fol.appDeleted():
		stopErr = fmt.Errorf("app %s: %w", served, deploys.ErrAppDeleted)
		log.Error("stopping: the app was deleted; finishing in-flight requests and queued events", "app", served.String())
	case err := <-errc:
		stopFollowing()
		n.Close()
		return err
	case err := <-lost:
		// Another writer replaced this node's lease: its actors are no
		// longer this process's to run, and a service manager restarts it.
		log.Error("stopping at once: the node lease is lost", "err", err)
		stopFollowing()
		srv.Close()
		n.Close()
		return err
	}
	stopFollowing()
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	err = n.Shutdown(srv, 10*time.Second)
	log.Info("stopped")
	return cmp.Or(stopErr, err)
}

// notifyReady tells systemd (a Type=notify unit: NOTIFY_SOCKET set) that
// the node is up once /_wasmkeep/ready first answers 200: with a bucket,
// after its lease and two heartbeat listings, not at the first listen.
// Without NOTIFY_SOCKET it sends nothing.
func notifyReady(ctx context.Context, n *node.Node, log *slog.Logger) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return
	}
	for !n.Ready() {
		if clock.Sleep(ctx, clock.Real, 100*time.Millisecond) != nil {
			return
		}
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("telling systemd the node is ready (NOTIFY_SOCKET)", "err", err)
	}
}

// namingNode adds node_id to every record, after the record's own
// attributes, so a line still begins with what it says
// (`msg=serving listen=...`), as it did before the id was added. It keeps
// node_id at the top level whatever groups a logger opened: those are
// kept here and built around the record's attributes, since a group
// opened in the handler beneath would take node_id in too.
type namingNode struct {
	slog.Handler // with the attributes given before any group
	id           string
	groups       []logGroup // outermost first
}

// logGroup is a group a logger opened (WithGroup), with the attributes
// given while it was the innermost.
type logGroup struct {
	name  string
	attrs []slog.Attr
}

func (h namingNode) Handle(ctx context.Context, r slog.Record) error {
	if len(h.groups) > 0 {
		var attrs []slog.Attr
		r.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a)
			return true
		})
		for _, g := range slices.Backward(h.groups) {
			attrs = []slog.Attr{slog.GroupAttrs(g.name, append(slices.Clip(g.attrs), attrs...)...)}
		}
		r = slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
		r.AddAttrs(attrs...)
	}
	r.AddAttrs(slog.String("node_id", h.id))
	return h.Handler.Handle(ctx, r)
}

func (h namingNode) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(h.groups) == 0 {
		return namingNode{h.Handler.WithAttrs(attrs), h.id, nil}
	}
	groups := slices.Clone(h.groups)
	inner := &groups[len(groups)-1]
	inner.attrs = append(slices.Clip(inner.attrs), attrs...)
	return namingNode{h.Handler, h.id, groups}
}

func (h namingNode) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return namingNode{h.Handler, h.id, append(slices.Clip(h.groups), logGroup{name: name})}
}

// metricsMux serves the metrics page at every path, and Go's profiler
// under /debug/pprof/ when profiler is on.
func metricsMux(page http.Handler, profiler bool) http.Handler {
	if !profiler {
		return page
	}
	mux := http.NewServeMux()
	mux.Handle("/", page)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// newLogger writes log lines to w as format says (text or json), from
// level on (debug, info, warn or error); empty takes text and info.
// Config.Node.Check has refused any other value. In JSON a duration is a
// number of seconds (slog's own is nanoseconds); text keeps "1.5s".
func newLogger(w io.Writer, format, level string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
	}[level]}
	if format == "json" {
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				return slog.Float64(a.Key, a.Value.Duration().Seconds())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// guestLogRate maps node.guest_log_rate to node.Options, where 0 is the
// default and discarding is guestlog.Discard.
func guestLogRate(rate *int) int {
	switch {
	case rate == nil:
		return 0
	case *rate == 0:
		return guestlog.Discard
	}
	return *rate
}
