package config

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

type engineSettings struct {
	Compiler bool   `koanf:"compiler"`
	Mode     string `koanf:"mode"`
}

func registry(t *testing.T) *plugin.Registry {
	t.Helper()
	newEngine := func() any { return &engineSettings{Compiler: true} }
	reg, err := plugin.NewRegistry(
		plugin.Info{Kind: plugin.Runtime, Name: "fast", API: "runtime/v1", NewConfig: newEngine, New: func(c any) (any, error) { return c, nil }},
		plugin.Info{Kind: plugin.Runtime, Name: "slow", API: "runtime/v1", NewConfig: newEngine, New: func(c any) (any, error) { return c, nil }},
		plugin.Info{Kind: plugin.Runtime, Name: "native", API: "runtime/v1", Unavailable: "build with CGO_ENABLED=1"},
		plugin.Info{Kind: plugin.Runtime, Name: "old", API: "runtime/v0", New: func(c any) (any, error) { return c, nil }},
		plugin.Info{Kind: plugin.Storage, Name: "db", API: "storage/v1", New: func(c any) (any, error) { return c, nil }},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

var apis = map[plugin.Kind]string{plugin.Runtime: "runtime/v1", plugin.Storage: "storage/v1"}

const defaults = `
runtime: {use: fast}
storage: {use: db}
node: {listen: "127.0.0.1:8080", idle_timeout: 30s, cpu_budget_ms: 50}
`

func load(t *testing.T, file string, env ...string) (*Config, error) {
	t.Helper()
	return loadWith(t, defaults, registry(t), file, env...)
}

func loadWith(t *testing.T, defaults string, reg *plugin.Registry, file string, env ...string) (*Config, error) {
	t.Helper()
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "plugins.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := map[plugin.Kind]string{plugin.Bucket: "bucket/v1"}
	for k, v := range apis {
		all[k] = v
	}
	return Load([]byte(defaults), path, env, reg, all)
}

func TestLayers(t *testing.T) {
	cfg, err := load(t, "runtime:\n  use: slow\n  slow:\n    compiler: false\nnode:\n  listen: ':9000'\n",
		"WASMKEEP_NODE__CPU_BUDGET_MS=70", "OTHER=1")
	if err != nil {
		t.Fatal(err)
	}
	rt := cfg.Plugins[plugin.Runtime]
	if rt.Info.Name != "slow" || rt.Config.(*engineSettings).Compiler {
		t.Errorf("runtime choice: %s %+v", rt.Info.Name, rt.Config)
	}
	if cfg.Node.Listen != ":9000" || cfg.Node.CPUBudgetMS != 70 || cfg.Node.IdleTimeout != 30*time.Second {
		t.Errorf("node: %+v", cfg.Node)
	}
	cfg, err = load(t, "", "WASMKEEP_RUNTIME__USE=slow")
	if err != nil || cfg.Plugins[plugin.Runtime].Info.Name != "slow" {
		t.Errorf("env choice: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	for file, want := range map[string]string{
		"nodes: {}\n":                        `unknown key "nodes" (valid: node, cluster, runtime, storage, bucket, transport)`,
		"node: {listn: x}\n":                 "unknown key node.listn (valid: listen, data_dir",
		"runtime: {use: nope}\n":             `runtime.use: unknown runtime plugin "nope" (this build has: fast, old, slow)`,
		"runtime: {fast: {compilr: true}}\n": "unknown key runtime.fast.compilr (valid: compiler, mode)",
		"runtime: {fsat: {}}\n":              `runtime.fsat: unknown runtime plugin "fsat"`,
		"runtime: {use: native}\n":           `runtime plugin "native" is not in this build: build with CGO_ENABLED=1`,
		"runtime: {use: old}\n":              "plugin runtime.old implements runtime/v0, but this kernel requires runtime/v1",
		"node: {idle_timeout: soon}\n":       "node",
		"storage: {use: ''}\n":               "no storage plugin chosen",
	} {
		_, err := load(t, file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", file, err, want)
		}
	}
	// Settings for a plugin this build lacks are accepted, for builds that have it.
	if _, err := load(t, "runtime: {native: {anything: 1}}\n"); err != nil {
		t.Error(err)
	}
}

type fsSettings struct {
	Dir string `koanf:"dir"`
}

type s3Settings struct {
	Endpoint string `koanf:"endpoint"`
	Region   string `koanf:"region"`
}

// withBuckets is registry(t) plus the bucket plugins fs, s3 and old, but
// for those named in except.
func withBuckets(t *testing.T, except ...string) *plugin.Registry {
	t.Helper()
	var infos []plugin.Info
	for _, in := range []plugin.Info{
		{Kind: plugin.Bucket, Name: "fs", API: "bucket/v1", NewConfig: func() any { return &fsSettings{Dir: "./bucket"} }, New: func(c any) (any, error) { return c, nil },
			Scheme: "file", FromURL: func(u *url.URL, c any) error { c.(*fsSettings).Dir = u.Path; return nil }},
		{Kind: plugin.Bucket, Name: "s3", API: "bucket/v1", NewConfig: func() any { return &s3Settings{Region: "us-east-1"} }, New: func(c any) (any, error) { return c, nil },
			Scheme: "s3", FromURL: func(u *url.URL, c any) error {
				if u.Host == "bad" {
					return errors.New("bad bucket name")
				}
				c.(*s3Settings).Endpoint = "bucket " + u.Host
				return nil
			}},
		{Kind: plugin.Bucket, Name: "old", API: "bucket/v0", New: func(c any) (any, error) { return c, nil }},
	} {
		if !slices.Contains(except, in.Name) {
			infos = append(infos, in)
		}
	}
	infos = append(infos, registry(t).List()...)
	reg, err := plugin.NewRegistry(infos...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// The bucket section loads like the runtime's, and is optional.
func TestBucket(t *testing.T) {
	reg := withBuckets(t)
	cfg, err := loadWith(t, defaults, reg, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Plugin(plugin.Bucket); err == nil || err.Error() != "no bucket plugin chosen (set bucket.use)" {
		t.Errorf("no bucket section: %v", err)
	}

	withFS := defaults + "bucket:\n  use: fs\n  fs: {dir: /srv/bucket}\n"
	cfg, err = loadWith(t, withFS, reg, "")
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := cfg.Plugin(plugin.Bucket); err != nil || ch.Info.Name != "fs" || ch.Config.(*fsSettings).Dir != "/srv/bucket" {
		t.Errorf("bucket from the defaults: %+v, %v", ch, err)
	}

	cfg, err = loadWith(t, withFS, reg, "bucket: {fs: {dir: /data}}\n", "WASMKEEP_BUCKET__USE=s3", "WASMKEEP_BUCKET__S3__ENDPOINT=http://127.0.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	ch := cfg.Plugins[plugin.Bucket]
	if s3, ok := ch.Config.(*s3Settings); !ok || s3.Endpoint != "http://127.0.0.1:7070" || s3.Region != "us-east-1" {
		t.Errorf("bucket from the environment: %+v", ch)
	}

	// A file can turn the default bucket off.
	cfg, err = loadWith(t, withFS, reg, "bucket: {use: ''}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Plugins[plugin.Bucket]; ok {
		t.Error("bucket.use '' still chose a bucket")
	}

	for file, want := range map[string]string{
		"bucket: {use: s4}\n":              `bucket.use: unknown bucket plugin "s4" (this build has: fs, old, s3)`,
		"bucket: {fs: {directory: x}}\n":   "unknown key bucket.fs.directory (valid: dir)",
		"bucket: {use: old}\n":             "plugin bucket.old implements bucket/v0, but this kernel requires bucket/v1",
		"bucket: {s3: {region: [a, b]}}\n": "bucket.s3",
	} {
		if _, err := loadWith(t, withFS, reg, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", file, err, want)
		}
	}
}

// A build without bucket plugins runs on defaults that choose one, and says
// so to a command that needs it.
func TestBucketNotInBuild(t *testing.T) {
	cfg, err := loadWith(t, defaults+"bucket:\n  use: fs\n  fs: {dir: /srv/bucket}\n", registry(t), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.Plugin(plugin.Bucket)
	if want := `bucket.use: bucket plugin "fs" chosen, but this build has no bucket plugin`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if _, err := cfg.Plugin(plugin.Runtime); err != nil {
		t.Error(err)
	}
}

// A build with bucket plugins but not the one the embedded defaults choose
// (a custom build without bucket-fs) starts: the bucket stays unchosen, and a
// command that needs one is told the default does not apply and what the
// build has. A user's own choice is still checked when the node starts.
func TestDefaultBucketNotInBuild(t *testing.T) {
	reg := withBuckets(t, "fs")
	withFS := defaults + "bucket: {use: fs}\n"
	cfg, err := loadWith(t, withFS, reg, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cfg.Plugin(plugin.Bucket)
	if want := `no bucket plugin chosen (set bucket.use); the embedded default, bucket.use: fs, does not apply: unknown bucket plugin "fs" (this build has: old, s3)`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}

	cfg, err = loadWith(t, withFS, reg, "bucket: {s3: {endpoint: 'http://127.0.0.1:7070'}}\n", "WASMKEEP_BUCKET__USE=s3")
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := cfg.Plugin(plugin.Bucket); err != nil || ch.Config.(*s3Settings).Endpoint != "http://127.0.0.1:7070" {
		t.Errorf("s3 chosen by the environment: %+v, %v", ch, err)
	}

	for file, want := range map[string]string{
		"bucket: {use: fs}\n":           `bucket.use: unknown bucket plugin "fs" (this build has: old, s3)`,
		"bucket: {s3: {endpont: x}}\n":  "unknown key bucket.s3.endpont (valid: endpoint, region)",
		"bucket: {fs: {dir: /srv/b}}\n": `bucket.fs: unknown bucket plugin "fs"`,
	} {
		if _, err := loadWith(t, withFS, reg, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", file, err, want)
		}
	}
}

// cluster.bucket picks the bucket plugin by its URL's scheme, applies the
// URL over that plugin's section, and needs a node id; --bucket and the
// other flags are the last layer. Each refusal names its key and flag.
func TestCluster(t *testing.T) {
	reg := withBuckets(t)
	cfg, err := loadWith(t, defaults, reg, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Bucket != "" || cfg.Cluster.Lease() != nodelease.DefaultSettings() || cfg.Cluster.HistoryRetention() != time.Hour {
		t.Errorf("defaults: %+v, lease %+v", cfg.Cluster, cfg.Cluster.Lease())
	}

	cfg, err = loadWith(t, defaults, reg, "cluster: {bucket: 's3://demo/prod', node_id: a, ttl: 6s, history_retention_secs: 0}\nbucket: {s3: {region: eu}}\n")
	if err != nil {
		t.Fatal(err)
	}
	ch := cfg.Plugins[plugin.Bucket]
	if s3, ok := ch.Config.(*s3Settings); !ok || s3.Endpoint != "bucket demo" || s3.Region != "eu" {
		t.Errorf("s3 from the URL: %+v", ch)
	}
	if cfg.Cluster.NodeID != "a" || cfg.Cluster.Lease().TTL != 6*time.Second || cfg.Cluster.HistoryRetention() != 0 {
		t.Errorf("cluster: %+v", cfg.Cluster)
	}

	all := map[plugin.Kind]string{plugin.Bucket: "bucket/v1", plugin.Runtime: "runtime/v1", plugin.Storage: "storage/v1"}
	cfg, err = Load([]byte(defaults), "", []string{"WASMKEEP_CLUSTER__BUCKET=s3://demo"}, reg, all,
		Flag{"--bucket", "cluster.bucket", "file:///srv/b"}, Flag{"--node-id", "cluster.node_id", "n-1"})
	if err != nil {
		t.Fatal(err)
	}
	if ch := cfg.Plugins[plugin.Bucket]; ch.Info.Name != "fs" || ch.Config.(*fsSettings).Dir != "/srv/b" || cfg.Cluster.NodeID != "n-1" {
		t.Errorf("flags over the environment: %+v, %+v", ch, cfg.Cluster)
	}
	_, err = Load([]byte(defaults), "", nil, reg, all, Flag{"--node-id", "cluster.node_id", "A"})
	if err == nil || !strings.HasPrefix(err.Error(), "--node-id: ") {
		t.Errorf("a bad flag is blamed on the flag: %v", err)
	}

	for file, want := range map[string]string{
		"cluster: {node_id: a}\n":                                         "cluster.node_id (--node-id) is \"a\" but cluster.bucket (--bucket) is not set",
		"cluster: {bucket: 's3://demo', node_id: Node_1}\n":               `cluster.node_id (--node-id): node id "Node_1" must be`,
		"cluster: {bucket: 'gs://demo', node_id: a}\n":                    `no bucket plugin in this build takes "gs" URLs (schemes: file, s3)`,
		"cluster: {bucket: 's3://bad', node_id: a}\n":                     "cluster.bucket (--bucket): bad bucket name",
		"cluster: {bucket: 's3://demo', node_id: a}\nbucket: {use: fs}\n": "is for bucket plugin s3, but bucket.use is fs",
		"cluster: {history_retention_secs: -1}\n":                         "cluster.history_retention_secs (--history-retention-secs) is -1",
		"cluster: {bucket_wait_secs: -5}\n":                               "cluster.bucket_wait_secs (--bucket-wait-secs) is -5: it cannot be negative",
		"cluster: {ttl: 2s}\n":                                            "cluster: safety 2s must be below ttl 2s",
		"cluster: {tll: 3s}\n":                                            "unknown key cluster.tll",
	} {
		if _, err := loadWith(t, defaults, reg, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", file, err, want)
		}
	}
}
