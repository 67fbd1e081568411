// Package fsbucket is the bucket/v1 plugin on a local directory: each object
// a file at its key's path, conditional creates and replaces atomic across
// the processes of one machine (a lock per key shard around the check and
// the rename, which a waiter breaks after a second so that a frozen process
// holds up nobody), so several nodes on one machine can share the directory
// as their bucket. See README.md for what it guarantees, ADR 1006 for why it
// is not built on gocloud.dev's fileblob and ADR 1042 for its locks.
package fsbucket

import (
	"errors"
	"fmt"
	"net/url"
	"path"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// Config is the plugin's configuration (plugins.yaml, strictly decoded).
type Config struct {
	// Dir is the bucket's root directory, created if missing. Nodes that
	// give the same directory share one bucket.
	Dir string `koanf:"dir"`
}

// NewConfig returns the defaults.
func NewConfig() *Config {
	return &Config{Dir: "./wasmkeep-data/bucket"}
}

// contract is the bucket contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/bucket: the kernel refuses a plugin whose version is not its own
// (ADR 1002).
const contract = "bucket/v1"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Bucket,
		Name:      "fs",
		API:       contract,
		Summary:   "a local directory, shared by the nodes of one machine (conditional writes under locks a frozen process cannot keep)",
		NewConfig: func() any { return NewConfig() },
		New:       func(config any) (any, error) { return New(config) },
		Scheme:    "file",
		FromURL:   FromURL,
	}
}

// FromURL applies --bucket file:///ABSOLUTE/DIR to a *Config: the bucket is
// that directory on this machine.
func FromURL(u *url.URL, config any) error {
	cfg, ok := config.(*Config)
	if !ok {
		return fmt.Errorf("config is %T, want *fsbucket.Config", config)
	}
	switch {
	case u.Opaque != "" || !path.IsAbs(u.Path):
		return fmt.Errorf("%s: want file:///ABSOLUTE/DIR (three slashes, then the directory's absolute path)", u.Redacted())
	case u.Host != "" && u.Host != "localhost":
		return fmt.Errorf("%s: a bucket-fs directory is on this machine: want file:///DIR, not host %q", u.Redacted(), u.Host)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%s: want file:///ABSOLUTE/DIR, without credentials, query or fragment", u.Redacted())
	}
	cfg.Dir = path.Clean(u.Path)
	return nil
}

// New opens the bucket of a *Config.
func New(config any) (bucket.Bucket, error) {
	cfg, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("config is %T, want *fsbucket.Config", config)
	}
	if cfg.Dir == "" {
		return nil, errors.New("dir is empty: set bucket.fs.dir to the bucket's directory")
	}
	return Open(cfg.Dir)
}
