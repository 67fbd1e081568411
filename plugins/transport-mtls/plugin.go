package mtlstransport

import (
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is the plugin's configuration (plugins.yaml, strictly decoded).
type Config struct {
	// HandshakeTimeout bounds each TLS handshake, dialed or accepted.
	HandshakeTimeout time.Duration `koanf:"handshake_timeout"`
}

// NewConfig returns the defaults.
func NewConfig() *Config { return &Config{HandshakeTimeout: 5 * time.Second} }

// contract is the transport contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/transport: the kernel refuses a plugin whose version is not its
// own (ADR 1002).
const contract = "transport/v1"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Transport,
		Name:      "mtls",
		API:       contract,
		Summary:   "mutual TLS 1.3 between nodes, each node's self-signed certificate pinned in its heartbeat",
		NewConfig: func() any { return NewConfig() },
		New:       func(config any) (any, error) { return New(config) },
	}
}

// New makes a transport with a new key from a *Config.
func New(config any) (*Transport, error) {
	cfg, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("config is %T, want *mtlstransport.Config", config)
	}
	return Open(cfg.HandshakeTimeout)
}
