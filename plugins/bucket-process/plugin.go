// Package processbucket runs a bucket provider as a separate binary: the
// bucket plugin "process" (bucket/v1) starts the binary plugins.yaml names,
// speaks the bucket provider protocol to it over hashicorp/go-plugin's gRPC
// connection, and stops it when the bucket is closed. Serve is the other
// side: what a provider binary's main calls. See README.md and ADR 1007.
package processbucket

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is the plugin's section of plugins.yaml (bucket.process).
type Config struct {
	// Path is the provider binary: a path, or a name looked up in PATH.
	Path string `koanf:"path"`
	// Args are its command-line arguments.
	Args []string `koanf:"args"`
	// Env adds to (and overrides) the environment the provider inherits
	// from the node: credentials for the provider's store, say.
	Env map[string]string `koanf:"env"`
	// Settings are the provider's own settings, which it decodes as
	// strictly as plugins.yaml (an unknown key is an error).
	Settings map[string]any `koanf:"settings"`
	// StartTimeout bounds starting the provider, the handshake and its
	// configuration (30s if 0).
	StartTimeout time.Duration `koanf:"start_timeout"`
	// SHA256, if set, is the binary's SHA-256 in hex: a binary that does
	// not match is not started.
	SHA256 string `koanf:"sha256"`
}

const defaultStartTimeout = 30 * time.Second

// contract is the bucket contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/bucket: the kernel refuses a plugin whose version is not its own
// (ADR 1002).
const contract = "bucket/v1"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Bucket,
		Name:      "process",
		API:       contract,
		Summary:   "a bucket provider run as a separate binary (go-plugin over gRPC)",
		NewConfig: func() any { return &Config{StartTimeout: defaultStartTimeout} },
		New: func(config any) (any, error) {
			c, ok := config.(*Config)
			if !ok {
				return nil, fmt.Errorf("configuration is %T, want *processbucket.Config", config)
			}
			return Open(*c, slog.Default())
		},
	}
}
