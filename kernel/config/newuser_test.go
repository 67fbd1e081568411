package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A duration without a unit is refused wherever it is given, naming the
// key and the value; YAML would otherwise read `idle_timeout: 30` as 30 ns.
func TestDurationNeedsAUnit(t *testing.T) {
	for file, want := range map[string]string{
		"node: {idle_timeout: 30}\n":   "node.idle_timeout: 30 has no unit: write it with one, such as 30s",
		"node: {idle_timeout: 1.5}\n":  "node.idle_timeout: 1.5 has no unit",
		"node: {idle_timeout: '30'}\n": `node.idle_timeout: "30" is not a duration: write a number with a unit`,
	} {
		if _, err := load(t, file); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "plugins.yaml: ") {
			t.Errorf("%q: got %v, want an error naming the file and containing %q", file, err, want)
		}
	}
	if _, err := load(t, "", "WASMKEEP_NODE__IDLE_TIMEOUT=30"); err == nil || !strings.Contains(err.Error(), `WASMKEEP_NODE__IDLE_TIMEOUT=30: node.idle_timeout: "30" is not a duration`) {
		t.Errorf("a variable without a unit: %v", err)
	}
	for file, want := range map[string]time.Duration{
		"node: {idle_timeout: 0}\n":     0, // as --idle-timeout 0
		"node: {idle_timeout: 1m30s}\n": 90 * time.Second,
	} {
		cfg, err := load(t, file)
		if err != nil || cfg.Node.IdleTimeout != want {
			t.Errorf("%q: got %v, %v; want %v", file, cfg, err, want)
		}
	}
	// Plugins' settings are decoded the same way.
	var settings struct {
		Timeout time.Duration `koanf:"request_timeout"`
	}
	err := DecodeStrict(map[string]any{"request_timeout": 30}, &settings, "bucket.s3")
	if err == nil || err.Error() != "bucket.s3.request_timeout: 30 has no unit: write it with one, such as 30s or 30ms" {
		t.Errorf("a plugin's duration without a unit: %v", err)
	}
}

// An error names the layer it comes from: the variable, with its value,
// rather than the file or the embedded defaults.
func TestErrorNamesItsSource(t *testing.T) {
	for _, c := range []struct {
		file string
		env  []string
		want string
	}{
		{"", []string{"WASMKEEP_NODE__MAX_INSTANCES=lots"}, `WASMKEEP_NODE__MAX_INSTANCES=lots: node.max_instances: "lots" is not a valid int`},
		{"node: {listen: ':9000'}\n", []string{"WASMKEEP_NODE__LISTEN=:9001", "WASMKEEP_NODE__LISTN=:9002"}, "WASMKEEP_NODE__LISTN=:9002: unknown key node.listn"},
		{"", []string{"WASMKEEP_RUNTIME__USE=fast", "WASMKEEP_RUNTIME__USE=nope"}, `WASMKEEP_RUNTIME__USE=nope: runtime.use: unknown runtime plugin "nope"`},
		{"", []string{"WASMKEEP_RUNTIME__FAST__COMPILER=sometimes"}, `WASMKEEP_RUNTIME__FAST__COMPILER=sometimes: runtime.fast.compiler: "sometimes" is not a valid bool`},
		{"", []string{"WASMKEEP_NODES__LISTEN=:1"}, `WASMKEEP_NODES__LISTEN=:1: unknown key "nodes"`},
		// The file's own error is the file's, whatever the variables say.
		{"node: {max_instances: lots}\n", []string{"WASMKEEP_NODE__CPU_BUDGET_MS=oops"}, `plugins.yaml: node.max_instances: "lots" is not a valid int`},
	} {
		_, err := load(t, c.file, c.env...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "embedded defaults") {
			t.Errorf("file %q, env %q: got %v, want an error containing %q", c.file, c.env, err, c.want)
		}
	}
}

// The serve flags that repeat have keys too, in the file and in variables
// (lists comma-separated there; a variable replaces the file's list), and
// node.actors serves classes.
func TestRepeatableSettings(t *testing.T) {
	file := `node:
  actors: {counter: counter.wasm, hub: hub.wasm}
  env: {hub: [hub.env, secrets.env], counter: counter.env}
  allow_outbound: [10.0.0.0/8, fd00::/8]
  allow_outbound_port: [25, 587]
  outbound_ca: [ca.pem]
`
	cfg, err := load(t, file)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Node
	if n.Actors["hub"] != "hub.wasm" || !slices.Equal(n.Env["hub"], []string{"hub.env", "secrets.env"}) ||
		!slices.Equal(n.Env["counter"], []string{"counter.env"}) || !slices.Equal(n.AllowOutbound, []string{"10.0.0.0/8", "fd00::/8"}) ||
		!slices.Equal(n.AllowOutboundPort, []string{"25", "587"}) || !slices.Equal(n.OutboundCA, []string{"ca.pem"}) {
		t.Errorf("from the file: %+v", n)
	}

	cfg, err = load(t, file,
		"WASMKEEP_NODE__ACTORS__CHAT=chat.wasm",
		"WASMKEEP_NODE__ENV__HUB=other.env",
		"WASMKEEP_NODE__ALLOW_OUTBOUND=10.1.0.0/16,10.2.0.0/16",
		"WASMKEEP_NODE__ALLOW_OUTBOUND_PORT=8443",
		"WASMKEEP_NODE__OUTBOUND_CA=a.pem,b.pem")
	if err != nil {
		t.Fatal(err)
	}
	n = cfg.Node
	if n.Actors["chat"] != "chat.wasm" || n.Actors["counter"] != "counter.wasm" || !slices.Equal(n.Env["hub"], []string{"other.env"}) ||
		!slices.Equal(n.Env["counter"], []string{"counter.env"}) || !slices.Equal(n.AllowOutbound, []string{"10.1.0.0/16", "10.2.0.0/16"}) ||
		!slices.Equal(n.AllowOutboundPort, []string{"8443"}) || !slices.Equal(n.OutboundCA, []string{"a.pem", "b.pem"}) {
		t.Errorf("from variables over the file: %+v", n)
	}
}
