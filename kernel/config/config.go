// Package config loads plugins.yaml: which plugin serves each kind, each
// plugin's own settings, and the node's settings. Layers, last wins: the
// defaults embedded in the binary, the --config file, WASMKEEP_* environment
// variables (WASMKEEP_RUNTIME__USE=wasmtime sets runtime.use; a double
// underscore separates levels), then command-line flags (applied by the
// caller). Every key is checked: an unknown one is an error naming it and
// listing what is valid.
package config

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is a loaded configuration.
type Config struct {
	Node Node
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

// Node is the node's own settings, the `node:` section.
type Node struct {
	Listen        string            `koanf:"listen"`
	DataDir       string            `koanf:"data_dir"`
	IdleTimeout   time.Duration     `koanf:"idle_timeout"`
	CPUBudgetMS   int               `koanf:"cpu_budget_ms"`
	HostCPUMS     int               `koanf:"host_cpu_budget_ms"`
	MaxInstances  int               `koanf:"max_instances"`
	MetricsListen string            `koanf:"metrics_listen"`
	Actors        map[string]string `koanf:"actors"` // class name to module file
	Access        map[string]string `koanf:"access"` // class name to access mode (open, existing, existing:NAME,..., internal)

	// Lines a second per actor instance; 0 discards them all. A pointer,
	// since unset (the default) and 0 differ.
	GuestLogRate *int `koanf:"guest_log_rate"`
}

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "WASMKEEP_"

// Load reads the layers. defaults is the embedded plugins.yaml; path, if
// not empty, a file over it; environ the environment (os.Environ()).
// apis gives the contract version the kernel requires of each kind.
func Load(defaults []byte, path string, environ []string, reg *plugin.Registry, apis map[plugin.Kind]string) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(defaults), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("embedded defaults: %w", err)
	}
	// user is what the file and the environment set, kept apart to tell a
	// user's choice from the embedded default.
	user := koanf.New(".")
	source := "the embedded defaults"
	if path != "" {
		if err := user.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		source = path
	}
	err := user.Load(env.Provider(".", env.Opt{
		Prefix: EnvPrefix,
		TransformFunc: func(key, v string) (string, any) {
			return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, EnvPrefix)), "__", "."), v
		},
		EnvironFunc: func() []string { return environ },
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	if err := k.Merge(user); err != nil {
		return nil, err
	}

	cfg := &Config{Plugins: map[plugin.Kind]Choice{}, unchosen: map[plugin.Kind]error{}}
	valid := []string{"node"}
	for _, kind := range plugin.Kinds {
		valid = append(valid, string(kind))
	}
	for _, top := range k.MapKeys("") {
		if !slices.Contains(valid, top) {
			return nil, fmt.Errorf("%s: unknown key %q (valid: %s)", source, top, strings.Join(valid, ", "))
		}
	}
	if err := DecodeStrict(k.Get("node"), &cfg.Node, "node"); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
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
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if ok {
			cfg.Plugins[kind] = ch
		}
	}
	for _, kind := range required {
		if _, err := cfg.Plugin(kind); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
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
// tags) as plugins.yaml is decoded: weakly typed, durations from strings, and
// a key the struct lacks is an error naming it (path.key) and the valid keys.
// Settings that reach a plugin another way (an out-of-process provider's)
// are decoded with it too.
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
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc()),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(section); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(md.Unused) > 0 {
		sort.Strings(md.Unused)
		return fmt.Errorf("unknown key %s.%s (valid: %s)", path, md.Unused[0], strings.Join(fieldKeys(out), ", "))
	}
	return nil
}

// fieldKeys lists the koanf keys of a struct.
func fieldKeys(out any) []string {
	t := reflect.TypeOf(out)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	keys := []string{}
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("koanf"), ","); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	if len(keys) == 0 {
		return []string{"none"}
	}
	return keys
}
