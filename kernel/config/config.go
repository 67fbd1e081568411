// Package config loads plugins.yaml: which plugin serves each kind, each
// plugin's own settings, and the node's settings. Layers, last wins: the
// defaults embedded in the binary, the --config file, WASMKEEP_* environment
// variables (WASMKEEP_RUNTIME__USE=wasmtime sets runtime.use; a double
// underscore separates levels), then command-line flags (applied by the
// caller). Every key is checked: an unknown one is an error naming it and
// listing what is valid.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is a loaded configuration.
type Config struct {
	Node    Node
	Cluster Cluster
	// Plugins holds the chosen plugin of each kind that has one (runtime
	// and storage always; bucket and transport when chosen).
	Plugins map[plugin.Kind]Choice

	// unchosen says why an optional kind has no plugin, where the reason is
	// more than an unset use: a choice this build cannot serve.
	unchosen map[plugin.Kind]error
}

// required are the kinds every node needs; the others (bucket, transport)
// are optional until a command needs them (Plugin).
var required = []plugin.Kind{plugin.Runtime, plugin.Storage}

// Plugin returns the chosen plugin of a kind, or an error saying why there is
// none: what a command that needs an optional kind calls.
func (c *Config) Plugin(kind plugin.Kind) (Choice, error) {
	if ch, ok := c.Plugins[kind]; ok {
		return ch, nil
	}
	if err, ok := c.unchosen[kind]; ok {
		return Choice{}, err
	}
	return Choice{}, fmt.Errorf("no %s plugin chosen (set %s.use)", kind, kind)
}

// Choice is the plugin chosen for a kind, with its decoded settings.
type Choice struct {
	Info   plugin.Info
	Config any // what Info.NewConfig returned, with plugins.yaml's settings applied
}

// New builds the plugin.
func (c Choice) New() (any, error) {
	v, err := c.Info.New(c.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Info.ID(), err)
	}
	return v, nil
}

// Settings are the plugin's settings as log attributes, keyed as in
// plugins.yaml (driver=mattn). For the log line that says what serves.
func (c Choice) Settings() []slog.Attr {
	var attrs []slog.Attr
	for key, f := range koanfFields(c.Config) {
		attrs = append(attrs, slog.Any(key, f.value.Interface()))
	}
	return attrs
}

// Node is the node's own settings, the `node:` section. Each field with a
// help tag is also a serve flag named as its key with dashes
// (max_instances, --max-instances), whose default is the embedded
// plugins.yaml's value; the other fields are set by repeatable flags of
// their own. A number cannot be negative (nor over a max tag), and a field
// with a oneof tag takes one of its values (or none: the default). A number
// or a string left at zero takes the node's default.
type Node struct {
	Listen        string        `koanf:"listen" help:"address to serve HTTP on"`
	DataDir       string        `koanf:"data_dir" help:"directory for actor databases"`
	CacheDir      string        `koanf:"cache_dir" help:"directory for compiled modules and pre-initialised snapshots, which the machine's nodes may share (empty: $CACHE_DIRECTORY, else wasmkeep in the user's cache directory, else <data_dir>/cache)"`
	IdleTimeout   time.Duration `koanf:"idle_timeout" help:"hibernate an actor after this long without events"`
	CPUBudgetMS   int           `koanf:"cpu_budget_ms" help:"guest CPU per event, in milliseconds"`
	HostCPUMS     int           `koanf:"host_cpu_budget_ms" help:"CPU per event besides the guest's budget, host calls included, in milliseconds"`
	MaxInstances  int           `koanf:"max_instances" help:"instances at once: resident actors and stateless requests"`
	MetricsListen string        `koanf:"metrics_listen" help:"serve Prometheus metrics on this address, e.g. 127.0.0.1:9100 (off when empty)"`

	// Lines a second per actor instance; 0 discards them all. A pointer,
	// since unset (the default) and 0 differ.
	GuestLogRate *int `koanf:"guest_log_rate" help:"lines a second each actor instance may print to the log, bursts of twice that; 0 discards them"`

	LogFormat string `koanf:"log_format" oneof:"text,json" help:"the node's log lines: text (key=value) or json, one object a line"`
	Preinit   string `koanf:"preinit" oneof:"on,off" help:"on: run once the start of a module that asks (docs/abi.md) and start its instances from what it left; off: never"`
	// ADR 1067.
	CHeapHugePages string `koanf:"c_heap_huge_pages" oneof:"on,off" help:"on: the C heap (SQLite's with the mattn driver) in one glibc arena on transparent huge pages, unless a plugin's C allocations are sparse (Wasmtime's); off: glibc's defaults"`
	LogLevel       string `koanf:"log_level" oneof:"debug,info,warn,error" help:"the least severe log lines written: debug, info, warn or error"`

	// The limits of the README's table, in its order.
	MaxQueuedEvents    int           `koanf:"max_queued_events" help:"events queued per actor; more are answered 429"`
	MaxBodyBytes       int64         `koanf:"max_body_bytes" help:"bytes of a request body (and of an actor_call's); more are answered 413"`
	RequestBodyTimeout time.Duration `koanf:"request_body_timeout" help:"time a client has to send a request's body once its headers arrived; past it 408 and the connection closes"`
	MaxConnections     int           `koanf:"max_connections" help:"client connections open at once, lowered to fit the open-files limit; more wait in the kernel's backlog"`
	MinFreeDiskBytes   int64         `koanf:"min_free_disk_bytes" help:"not ready while the data directory's disk has less free than this, or than 5% of a disk smaller than 20 times it; 0 turns the check off"`
	// A pointer, since unset (the default, from the lease timings) and 0
	// (off) differ; plugins.yaml gives it no value for that reason.
	FailoverWaitSecs *int `koanf:"failover_wait_secs" help:"seconds a GET or HEAD without a body, or a WebSocket upgrade, for an actor whose node died is kept until the actor is taken over, instead of a 503 at once; default from the lease timings: ttl + grace + the watch before a fence + a heartbeat period + 1 (25), 0 turns it off"`
	// A pointer, since 0 (off) is not the default.
	AlarmSweepSecs         *int          `koanf:"alarm_sweep_secs" help:"with a bucket: seconds between two sweeps of the app's overdue alarms in the bucket, which fire the alarms of a dead node's actors on the live nodes; 0 turns the sweep off"`
	MaxHeaderFields        int           `koanf:"max_header_fields" help:"header fields of a request that reach an actor, Host included; more are answered 431"`
	MaxHeaderBytes         int           `koanf:"max_header_bytes" help:"bytes of a request's header names and values and its target that reach an actor; more are answered 431"`
	WallClock              time.Duration `koanf:"wall_clock" help:"wall time per event; past it the event answers 500 and its instance is discarded"`
	MemoryLimitMiB         int           `koanf:"memory_limit_mib" max:"4095" help:"MiB of linear memory per instance; past it memory.grow fails in the guest"`
	SQLMaxDatabaseBytes    int64         `koanf:"sql_max_database_bytes" help:"bytes of an actor's database; past it writes fail with quota-exceeded"`
	SQLMaxValueBytes       int           `koanf:"sql_max_value_bytes" max:"1000000000" help:"bytes of one SQL text or blob value (SQLite's ceiling: 1e9)"`
	SQLMaxResultBytes      int           `koanf:"sql_max_result_bytes" help:"bytes of one SQL query result, encoded"`
	SQLCPUBudgetMS         int           `koanf:"sql_cpu_budget_ms" help:"SQL CPU per event, statements and their compiling together, in milliseconds"`
	WebSocketsPerActor     int           `koanf:"websockets_per_actor" help:"open WebSockets per actor; more are answered 503"`
	WebSocketsPerNode      int           `koanf:"websockets_per_node" help:"open WebSockets on the node; more are answered 503"`
	WebSocketMaxMessage    int64         `koanf:"websocket_max_message_bytes" help:"bytes of a message from a WebSocket client; larger closes the socket with 1009"`
	WebSocketQueueMessages int           `koanf:"websocket_queue_messages" help:"messages queued per WebSocket before a send gets backpressure"`
	WebSocketQueueBytes    int           `koanf:"websocket_queue_bytes" help:"bytes queued per WebSocket before a send gets backpressure"`
	WebSocketPingAfter     time.Duration `koanf:"websocket_ping_after" help:"silence from a WebSocket client before the node pings it"`
	WebSocketPongWait      time.Duration `koanf:"websocket_pong_wait" help:"time a pinged WebSocket client has to answer before its socket closes"`
	MaxFetches             int           `koanf:"max_fetches" help:"outbound HTTP requests (http_fetch) in flight on the node; more fail with too-many-requests"`
	FetchStepTimeout       time.Duration `koanf:"fetch_step_timeout" help:"time for each step of an outbound request (connect, first byte, next byte) unless the guest asks"`
	FetchMaxStepTimeout    time.Duration `koanf:"fetch_max_step_timeout" help:"the longest step timeout a guest may ask for"`
	FetchMaxBodyBytes      int64         `koanf:"fetch_max_body_bytes" help:"bytes of an outbound request's body, and of its response's; more fail with too-large"`

	App    string            `koanf:"app"`    // the app served, tenant/app (serve --app); "" for default/default. Needs a bucket.
	Actors map[string]string `koanf:"actors"` // class name to module file
	Access map[string]string `koanf:"access"` // class name to access mode (open, existing, existing:NAME,..., internal)

	// What the repeatable serve flags of the same names set; a list from a
	// variable is comma-separated.
	Env               map[string][]string `koanf:"env"`                 // class name to its env files, read in order
	AllowOutbound     []string            `koanf:"allow_outbound"`      // CIDR ranges or addresses
	AllowOutboundPort []string            `koanf:"allow_outbound_port"` // port numbers
	OutboundCA        []string            `koanf:"outbound_ca"`         // PEM files of CA certificates
	SecretsKey        []string            `koanf:"secrets_key"`         // key files of the app's secrets (serve --secrets-key): two during a rotation
	NoSecrets         bool                `koanf:"no_secrets"`          // the node runs without the app's secrets, with --env only (serve --no-secrets)
	Pprof             bool                `koanf:"pprof"`               // Go's profiler at /debug/pprof/ on the metrics listener (serve --pprof)
	AccessLog         bool                `koanf:"access_log"`          // a log line a request on the public listener (serve --access-log)
}

// Check refuses a negative number, one over its max tag, or a string not
// among its oneof values, naming the key, its flag, the value and what is
// valid.
func (n Node) Check() error {
	for key, f := range koanfFields(&n) {
		v, field := f.value, f.field
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				continue
			}
			v = v.Elem()
		}
		name := "node." + key + " (--" + FlagName(key) + ")"
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if v.Int() < 0 {
				return fmt.Errorf("%s is %v: it cannot be negative", name, v.Interface())
			}
			if most, ok := field.Tag.Lookup("max"); ok {
				if m, _ := strconv.ParseInt(most, 10, 64); v.Int() > m {
					return fmt.Errorf("%s is %v: it can be at most %s", name, v.Interface(), most)
				}
			}
		case reflect.String:
			valid, ok := field.Tag.Lookup("oneof")
			if ok && v.String() != "" && !slices.Contains(strings.Split(valid, ","), v.String()) {
				return fmt.Errorf("%s is %q: want %s", name, v.String(), strings.ReplaceAll(valid, ",", ", "))
			}
		}
	}
	if n.FetchMaxStepTimeout != 0 && n.FetchStepTimeout > n.FetchMaxStepTimeout {
		return fmt.Errorf("node.fetch_step_timeout (--fetch-step-timeout) is %v: it can be at most node.fetch_max_step_timeout (--fetch-max-step-timeout), %v", n.FetchStepTimeout, n.FetchMaxStepTimeout)
	}
	return nil
}

// FlagName is the serve flag of a node key: its underscores as dashes.
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// NodeDefaults decodes the node section of the embedded defaults: what each
// flag shows as its default.
func NodeDefaults(defaults []byte) (Node, error) {
	var n Node
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(defaults), yaml.Parser()); err != nil {
		return n, fmt.Errorf("embedded defaults: %w", err)
	}
	if err := DecodeStrict(k.Get("node"), &n, "node"); err != nil {
		return n, fmt.Errorf("embedded defaults: %w", err)
	}
	return n, n.Check()
}

// NodeFields yields the key, the help text, the oneof values and the
// address of each field of n that has a flag.
func NodeFields(n *Node) iter.Seq2[string, NodeField] {
	return func(yield func(string, NodeField) bool) {
		for key, f := range koanfFields(n) {
			help, ok := f.field.Tag.Lookup("help")
			if ok && !yield(key, NodeField{Help: help, Ptr: f.value.Addr().Interface()}) {
				return
			}
		}
	}
}

// NodeField is one flag's worth of a Node field.
type NodeField struct {
	Help string
	Ptr  any // *string, *int, *int64, *time.Duration or **int
}

// Cluster is the `cluster:` section: the shared bucket, this node's id in
// it, the node lease's timings (book ADR 0020 section 5) and how long old
// history is kept. Without a bucket the node runs alone, as it always has.
type Cluster struct {
	// Bucket is the shared bucket's URL (--bucket): its scheme picks the
	// bucket plugin that takes it (s3://BUCKET[/PREFIX] for bucket-s3,
	// file:///DIR for bucket-fs), whose other settings still come from the
	// bucket: section. Empty: no cluster.
	Bucket string `koanf:"bucket"`
	NodeID string `koanf:"node_id"` // --node-id: [a-z0-9-], unique among the bucket's nodes
	// Advertise is the URL other nodes reach this one at (--advertise),
	// named in its lease; empty: http:// and node.listen.
	Advertise string `koanf:"advertise"`
	// ClusterListen is the cluster listener's address (--cluster-listen),
	// where peers reach this node over mutual TLS; ClusterAdvertise the
	// https:// URL they reach it at (--cluster-advertise; empty: https://
	// and the address bound, when that names a host).
	ClusterListen    string `koanf:"cluster_listen"`
	ClusterAdvertise string `koanf:"cluster_advertise"`
	// Plaintext is whether plain HTTP between nodes is used
	// (--cluster-plaintext): refuse (empty too) needs a cluster listener
	// and believes a node's call only there; accept reaches peers without
	// one at their advertised address and believes signed calls on the
	// public port too.
	Plaintext string `koanf:"plaintext"`
	// HistoryRetentionSecs keeps history younger than this from garbage
	// collection (--history-retention-secs; 0 collects at once). A pointer,
	// since unset (history.DefaultRetention) and 0 differ.
	HistoryRetentionSecs *int `koanf:"history_retention_secs"`
	// BucketWaitSecs is how long a starting node waits for a bucket that
	// does not answer before it exits with an error
	// (--bucket-wait-secs); 0 waits until it answers.
	BucketWaitSecs int `koanf:"bucket_wait_secs"`

	// The lease's timings; zero takes the book's default
	// (nodelease.DefaultSettings).
	TTL             time.Duration `koanf:"ttl"`              // a lease write keeps the lease this long from its send
	Grace           time.Duration `koanf:"grace"`            // added to ttl before a peer takes a silent node's actors
	Safety          time.Duration `koanf:"safety"`           // taken off ttl by the holder
	MaxSkew         time.Duration `koanf:"max_skew"`         // the clock skew between nodes the timings tolerate
	HeartbeatPeriod time.Duration `koanf:"heartbeat_period"` // a lease write this often, at most ttl / 3 (zero: 3 s or ttl / 3 if less)
}

// Lease is the node lease's settings.
func (c Cluster) Lease() nodelease.Settings {
	d := nodelease.DefaultSettings()
	ttl := cmp.Or(c.TTL, d.TTL)
	return nodelease.Settings{TTL: ttl, Grace: cmp.Or(c.Grace, d.Grace), Safety: cmp.Or(c.Safety, d.Safety),
		MaxSkew: cmp.Or(c.MaxSkew, d.MaxSkew), HeartbeatPeriod: cmp.Or(c.HeartbeatPeriod, min(d.HeartbeatPeriod, ttl/3))}
}

// HistoryRetention is how long history is kept from garbage collection.
func (c Cluster) HistoryRetention() time.Duration {
	if c.HistoryRetentionSecs == nil {
		return history.DefaultRetention
	}
	return time.Duration(*c.HistoryRetentionSecs) * time.Second
}

// Check refuses a node id without a bucket, a malformed id, a negative
// retention or bucket wait and inconsistent lease timings, naming the key. (Serving with a
// bucket also needs an id; the bucket commands do not.)
func (c Cluster) Check() error {
	switch {
	case c.Bucket == "" && c.NodeID != "":
		return fmt.Errorf("cluster.node_id (--node-id) is %q but cluster.bucket (--bucket) is not set: a node id names a node in a bucket", c.NodeID)
	case c.Plaintext != "" && c.Plaintext != "refuse" && c.Plaintext != "accept":
		return fmt.Errorf("cluster.plaintext (--cluster-plaintext) is %q: refuse or accept", c.Plaintext)
	case c.ClusterAdvertise != "" && c.ClusterListen == "":
		return fmt.Errorf("cluster.cluster_advertise (--cluster-advertise) is %q but cluster.cluster_listen (--cluster-listen) is not set: the two go together", c.ClusterAdvertise)
	case c.ClusterAdvertise != "" && !strings.HasPrefix(c.ClusterAdvertise, "https://"):
		return fmt.Errorf("cluster.cluster_advertise (--cluster-advertise) %q must be an https:// URL", c.ClusterAdvertise)
	case c.Bucket == "" && c.ClusterListen != "":
		return fmt.Errorf("cluster.cluster_listen (--cluster-listen) is %q but cluster.bucket (--bucket) is not set: the cluster listener serves a bucket's nodes", c.ClusterListen)
	case c.HistoryRetention() < 0:
		return fmt.Errorf("cluster.history_retention_secs (--history-retention-secs) is %d: it cannot be negative", *c.HistoryRetentionSecs)
	case c.BucketWaitSecs < 0:
		return fmt.Errorf("cluster.bucket_wait_secs (--bucket-wait-secs) is %d: it cannot be negative (0 waits until the bucket answers)", c.BucketWaitSecs)
	}
	if c.NodeID != "" {
		if err := nodelease.CheckNodeID(c.NodeID); err != nil {
			return fmt.Errorf("cluster.node_id (--node-id): %w", err)
		}
	}
	return c.Lease().Validate()
}

// bucketURL parses cluster.bucket and finds the bucket plugin its scheme
// names.
func (c Cluster) bucketURL(reg *plugin.Registry) (*url.URL, plugin.Info, error) {
	u, err := url.Parse(c.Bucket)
	if err != nil {
		return nil, plugin.Info{}, fmt.Errorf("cluster.bucket (--bucket): %w", err)
	}
	in, ok := reg.ByScheme(plugin.Bucket, u.Scheme)
	if !ok {
		schemes := reg.Schemes(plugin.Bucket)
		if len(schemes) == 0 {
			schemes = []string{"none in this build"}
		}
		return nil, in, fmt.Errorf("cluster.bucket (--bucket) %s: no bucket plugin in this build takes %q URLs (schemes: %s)", u.Redacted(), u.Scheme, strings.Join(schemes, ", "))
	}
	return u, in, nil
}

// Flag is a command-line flag's setting, the last layer Load applies:
// Key in plugins.yaml's terms (cluster.bucket), Name the flag (--bucket)
// that errors name.
type Flag struct {
	Name, Key string
	Value     any
}

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "WASMKEEP_"

// Load reads the layers. defaults is the embedded plugins.yaml; path, if
// not empty, a file over it; environ the environment (os.Environ()).
// apis gives the contract version the kernel requires of each kind. An
// error names the layer it comes from: the file, or the variable.
// flags are the command's flags that were given, applied last.
func Load(defaults []byte, path string, environ []string, reg *plugin.Registry, apis map[plugin.Kind]string, flags ...Flag) (*Config, error) {
	base := koanf.New(".")
	if err := base.Load(rawbytes.Provider(defaults), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("embedded defaults: %w", err)
	}
	layers := []layer{{"the embedded defaults", base}}
	if path != "" {
		k := koanf.New(".")
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		layers = append(layers, layer{path, k})
	}
	// One layer per variable, so that an error can name its variable.
	for _, kv := range environ {
		if !strings.HasPrefix(kv, EnvPrefix) {
			continue
		}
		k := koanf.New(".")
		err := k.Load(env.Provider(".", env.Opt{
			Prefix: EnvPrefix,
			TransformFunc: func(key, v string) (string, any) {
				return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, EnvPrefix)), "__", "."), v
			},
			EnvironFunc: func() []string { return []string{kv} },
		}), nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv, err)
		}
		layers = append(layers, layer{kv, k})
	}
	for _, f := range flags {
		k := koanf.New(".")
		if err := k.Set(f.Key, f.Value); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		layers = append(layers, layer{f.Name, k})
	}
	cfg, err := build(layers, reg, apis)
	if err == nil {
		return cfg, nil
	}
	// The layer to blame is the first over which the configuration no
	// longer loads: the last one, if none before it fails.
	blamed := len(layers) - 1
	for i := range blamed {
		if _, perr := build(layers[:i+1], reg, apis); perr != nil {
			blamed, err = i, perr
			break
		}
	}
	return nil, fmt.Errorf("%s: %w", layers[blamed].name, err)
}

// layer is one source of settings, named in its errors.
type layer struct {
	name string // "the embedded defaults", the file's path, a variable's NAME=value, or a flag
	k    *koanf.Koanf
}

// build merges the layers, the embedded defaults first, and decodes them.
func build(layers []layer, reg *plugin.Registry, apis map[plugin.Kind]string) (*Config, error) {
	// user is what the file and the environment set, kept apart to tell a
	// user's choice from the embedded default.
	user := koanf.New(".")
	for _, l := range layers[1:] {
		if err := user.Merge(l.k); err != nil {
			return nil, err
		}
	}
	k := koanf.New(".")
	if err := k.Merge(layers[0].k); err != nil {
		return nil, err
	}
	if err := k.Merge(user); err != nil {
		return nil, err
	}

	cfg := &Config{Plugins: map[plugin.Kind]Choice{}, unchosen: map[plugin.Kind]error{}}
	valid := []string{"node", "cluster"}
	for _, kind := range plugin.Kinds {
		valid = append(valid, string(kind))
	}
	for _, top := range k.MapKeys("") {
		if !slices.Contains(valid, top) {
			return nil, fmt.Errorf("unknown key %q (valid: %s)", top, strings.Join(valid, ", "))
		}
	}
	if err := DecodeStrict(k.Get("node"), &cfg.Node, "node"); err != nil {
		return nil, err
	}
	if err := cfg.Node.Check(); err != nil {
		return nil, err
	}
	if err := DecodeStrict(k.Get("cluster"), &cfg.Cluster, "cluster"); err != nil {
		return nil, err
	}
	if err := cfg.Cluster.Check(); err != nil {
		return nil, err
	}
	// A cluster's bucket URL chooses the bucket plugin by its scheme.
	var bucketURL *url.URL
	if cfg.Cluster.Bucket != "" {
		u, in, err := cfg.Cluster.bucketURL(reg)
		if err != nil {
			return nil, err
		}
		if use := user.String("bucket.use"); use != "" && use != in.Name {
			return nil, fmt.Errorf("cluster.bucket (--bucket) %s is for bucket plugin %s, but bucket.use is %s: leave bucket.use out, or give a %s URL", u.Redacted(), in.Name, use, use)
		}
		bucketURL = u
		if err := k.Set("bucket.use", in.Name); err != nil {
			return nil, err
		}
	}
	for _, kind := range plugin.Kinds {
		use := k.String(string(kind) + ".use")
		if !slices.Contains(required, kind) {
			// A build without any plugin of an optional kind still runs on a
			// configuration that names one: its section waits for a build
			// that has.
			if len(reg.Names(kind, true)) == 0 {
				if use != "" {
					cfg.unchosen[kind] = fmt.Errorf("%s.use: %s plugin %q chosen, but this build has no %s plugin", kind, kind, use, kind)
				}
				continue
			}
			// A custom build may lack the plugin the embedded defaults
			// choose (bucket-fs): the kind stays unchosen until a command
			// needs it. A user's own choice is checked below.
			if _, err := reg.Lookup(kind, use); use != "" && err != nil && !user.Exists(string(kind)+".use") {
				cfg.unchosen[kind] = fmt.Errorf("no %s plugin chosen (set %s.use); the embedded default, %s.use: %s, does not apply: %w", kind, kind, kind, use, err)
				use = ""
			}
		}
		ch, ok, err := choose(k, kind, use, reg, apis[kind])
		if err != nil {
			return nil, err
		}
		if ok && kind == plugin.Bucket && bucketURL != nil {
			if err := ch.Info.FromURL(bucketURL, ch.Config); err != nil {
				return nil, fmt.Errorf("cluster.bucket (--bucket): %w", err)
			}
		}
		if ok {
			cfg.Plugins[kind] = ch
		}
	}
	for _, kind := range required {
		if _, err := cfg.Plugin(kind); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// choose reads a kind's section: use names the plugin (the section's use,
// unless Load set it aside), and every other key is the name of a plugin of
// that kind holding its settings.
func choose(k *koanf.Koanf, kind plugin.Kind, use string, reg *plugin.Registry, api string) (Choice, bool, error) {
	sec := k.Cut(string(kind))
	var ch Choice
	for _, key := range sec.MapKeys("") {
		if key == "use" {
			continue
		}
		in, known := reg.Get(kind, key)
		if !known {
			return ch, false, fmt.Errorf("%s.%s: unknown %s plugin %q (valid: use, %s)", kind, key, kind, key, strings.Join(reg.Names(kind, true), ", "))
		}
		if in.Unavailable != "" {
			continue // settings for a plugin this build lacks are kept for builds that have it
		}
		settings := newConfig(in)
		if err := DecodeStrict(sec.Get(key), settings, string(kind)+"."+key); err != nil {
			return ch, false, err
		}
		if key == use {
			ch = Choice{Info: in, Config: settings}
		}
	}
	if use == "" {
		return ch, false, nil
	}
	in, err := reg.Lookup(kind, use)
	if err != nil {
		return ch, false, fmt.Errorf("%s.use: %w", kind, err)
	}
	if err := plugin.CheckAPI(in, api); err != nil {
		return ch, false, err
	}
	if ch.Config == nil {
		ch = Choice{Info: in, Config: newConfig(in)}
	}
	return ch, true, nil
}

func newConfig(in plugin.Info) any {
	if in.NewConfig == nil {
		return &struct{}{}
	}
	return in.NewConfig()
}

// DecodeStrict decodes a section into out (a pointer to a struct with koanf
// tags) as plugins.yaml is decoded: weakly typed, durations from strings
// with a unit, lists from comma-separated strings, and a key the struct
// lacks is an error naming it (path.key) and the valid keys. Settings that
// reach a plugin another way (an out-of-process provider's) are decoded
// with it too.
func DecodeStrict(section any, out any, path string) error {
	if section == nil {
		return nil
	}
	var md mapstructure.Metadata
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           out,
		TagName:          "koanf",
		WeaklyTypedInput: true,
		Metadata:         &md,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			duration,
			mapstructure.StringToSliceHookFunc(","),
			mapstructure.TextUnmarshallerHookFunc()),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(section); err != nil {
		return decodeError(path, err)
	}
	if len(md.Unused) > 0 {
		sort.Strings(md.Unused)
		return fmt.Errorf("unknown key %s.%s (valid: %s)", path, md.Unused[0], strings.Join(fieldKeys(out), ", "))
	}
	return nil
}

// duration reads a duration from a string with a unit ("30s"), as the
// flags do. It refuses a number: YAML reads `idle_timeout: 30` as one, which
// would otherwise be 30 ns. As with the flags, 0 needs no unit.
func duration(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		d, err := time.ParseDuration(data.(string))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration: write a number with a unit, such as 30s, 1m or 500ms", data)
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if !reflect.ValueOf(data).IsZero() {
			return nil, fmt.Errorf("%v has no unit: write it with one, such as %vs or %vms", data, data, data)
		}
	}
	return data, nil
}

// decodeError restates the decoder's errors, one a line, each naming its
// key in full (path.key) and, where the decoder leaves it out, the value.
func decodeError(path string, err error) error {
	var lines []string
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		de, ok := err.(*mapstructure.DecodeError)
		if !ok {
			if next := errors.Unwrap(err); next != nil {
				walk(next)
				return
			}
			lines = append(lines, path+": "+err.Error())
			return
		}
		key := path + "." + strings.NewReplacer("[", ".", "]", "").Replace(de.Name())
		var pe *mapstructure.ParseError
		var ue *mapstructure.UnconvertibleTypeError
		switch {
		case errors.As(de, &pe):
			lines = append(lines, fmt.Sprintf("%s: %q is not a valid %s", key, fmt.Sprint(pe.Value), pe.Expected.Type()))
		case errors.As(de, &ue):
			lines = append(lines, fmt.Sprintf("%s: %q is not a valid %s", key, fmt.Sprint(ue.Value), ue.Expected.Type()))
		default:
			lines = append(lines, key+": "+de.Unwrap().Error())
		}
	}
	walk(err)
	sort.Strings(lines) // the decoder meets a map's keys in random order
	return errors.New(strings.Join(lines, "\n"))
}

// fieldKeys lists the koanf keys of a struct.
func fieldKeys(out any) []string {
	keys := []string{}
	for key := range koanfFields(out) {
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return []string{"none"}
	}
	return keys
}

// koanfFields yields the koanf key, the field and its value of each tagged
// field of the struct v is or points to.
func koanfFields(v any) iter.Seq2[string, taggedField] {
	return func(yield func(string, taggedField) bool) {
		rv := reflect.ValueOf(v)
		for rv.Kind() == reflect.Pointer {
			rv = rv.Elem()
		}
		if rv.Kind() != reflect.Struct {
			return
		}
		for i := 0; i < rv.NumField(); i++ {
			tag, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("koanf"), ",")
			if tag != "" && tag != "-" && !yield(tag, taggedField{rv.Type().Field(i), rv.Field(i)}) {
				return
			}
		}
	}
}

type taggedField struct {
	field reflect.StructField
	value reflect.Value
}
