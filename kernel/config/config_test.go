package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "plugins.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Load([]byte(defaults), path, env, registry(t), apis)
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
		"nodes: {}\n":                        `unknown key "nodes" (valid: node, runtime, storage, bucket, transport)`,
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
