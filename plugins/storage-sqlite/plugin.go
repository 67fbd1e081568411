// Package sqlitestorage is the storage/v2 plugin on SQLite: one database file
// per actor, in WAL mode, behind the book's guest sandbox and quotas. See
// README.md for what it enforces and how it is configured.
package sqlitestorage

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Config is the plugin's configuration (plugins.yaml, strictly decoded).
type Config struct {
	// Driver is the SQLite binding: "mattn" (github.com/mattn/go-sqlite3,
	// cgo; in builds with cgo and its sqlite_fts5 tag) or "modernc"
	// (modernc.org/sqlite, pure Go). The default is mattn where the build
	// has it, else modernc (defaultDriver).
	Driver string `koanf:"driver"`
	// Synchronous is SQLite's synchronous setting for plain exec: "normal"
	// (a commit is written to the log but not fsynced; exec-durable fsyncs)
	// or "full" (every commit is fsynced).
	Synchronous string `koanf:"synchronous"`
	// StatementCache is how many prepared statements each database keeps,
	// for guest and for host statements each.
	StatementCache int `koanf:"statement_cache"`
}

// NewConfig returns the defaults.
func NewConfig() *Config {
	return &Config{Driver: defaultDriver, Synchronous: "normal", StatementCache: 64}
}

// bindings are the SQLite bindings this build has, by Config.Driver
// (mattn.go adds "mattn" in cgo builds).
var bindings = map[string]binding{"modernc": modernc{}}

// missing are the bindings this build lacks, with why and how to get them.
var missing = map[string]error{}

// contract is the storage contract version this plugin is built against.
// Change it only when the plugin is brought up to a new version of
// kernel/storage: the kernel refuses a plugin whose version is not its own
// (ADR 1002).
const contract = "storage/v2"

// Info describes the plugin to the kernel's registry.
func Info() plugin.Info {
	return plugin.Info{
		Kind:      plugin.Storage,
		Name:      "sqlite",
		API:       contract,
		Summary:   "SQLite, one WAL-mode file per actor, sandboxed (drivers: modernc, pure Go; mattn, cgo)",
		NewConfig: func() any { return NewConfig() },
		New:       func(config any) (any, error) { return New(config) },
	}
}

// New builds the driver from a *Config.
func New(config any) (storage.Driver, error) {
	cfg, ok := config.(*Config)
	if !ok {
		return nil, fmt.Errorf("config is %T, want *sqlitestorage.Config", config)
	}
	if err := missing[cfg.Driver]; err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	b, ok := bindings[cfg.Driver]
	if !ok {
		return nil, fmt.Errorf("unknown driver %q (this build has: %s)", cfg.Driver, strings.Join(slices.Sorted(maps.Keys(bindings)), ", "))
	}
	if cfg.Synchronous != "normal" && cfg.Synchronous != "full" {
		return nil, fmt.Errorf("synchronous is %q, want \"normal\" or \"full\"", cfg.Synchronous)
	}
	if cfg.StatementCache < 1 {
		return nil, fmt.Errorf("statement_cache is %d, want at least 1", cfg.StatementCache)
	}
	caps, err := capabilitiesOf(cfg.Driver, b)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	if err := checkRequired(cfg.Driver, b, caps); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	return &driver{b: b, cfg: *cfg, caps: caps}, nil
}

var (
	_ storage.Driver           = (*driver)(nil)
	_ storage.CapabilityLister = (*driver)(nil)
)

type driver struct {
	b    binding
	cfg  Config
	caps []string
	tpl  templates // template.go
}

// Capabilities lists the guest-visible SQL that depends on the driver's
// SQLite build (see capabilities.go): virtual table modules ("fts3",
// "fts4", "fts5", "rtree"), function families ("math", "soundex",
// "sqlite_offset") and behaviour ("update_delete_limit", "stat4",
// "like_blobs"). Every driver has "fts5" and "rtree".
func (drv *driver) Capabilities() []string { return slices.Clone(drv.caps) }

// maxValueBytes is SQLite's compiled-in ceiling for SQLITE_LIMIT_LENGTH.
const maxValueBytes = 1_000_000_000

// checkOptions refuses limits the plugin cannot apply (opts has its
// defaults).
func checkOptions(path string, opts storage.Options) error {
	switch {
	case opts.MaxDatabaseBytes < 0, opts.MaxValueBytes < 0, opts.MaxResultBytes < 0, opts.SQLCPUPerEvent < 0, opts.WritePerEvent < 0:
		return fmt.Errorf("open %s: negative limit in %+v", path, opts)
	case opts.MaxValueBytes > maxValueBytes:
		return fmt.Errorf("open %s: MaxValueBytes %d is over SQLite's ceiling of %d", path, opts.MaxValueBytes, maxValueBytes)
	}
	return nil
}

// open opens the database file at path with the driver's settings.
func (drv *driver) open(path string, lockFD int, opts storage.Options) (*db, error) {
	return open(drv.b, path, lockFD, opts, drv.cfg.Synchronous, drv.cfg.StatementCache, slices.Contains(drv.caps, storage.CapLikeBlobs))
}
