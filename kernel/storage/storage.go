// Package storage is the contract between the kernel and an actor's SQL
// database (storage/v1). The kernel owns when a database opens and closes,
// the event boundaries and what a durable write means in a cluster; a storage
// plugin owns the SQL engine, its sandbox, its quotas and the durable local
// commit.
//
// conformance/storagetest holds the rules every implementation must pass.
package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// API is the contract version a storage plugin declares.
const API = "storage/v1"

// Driver is what a storage plugin's New returns.
type Driver interface {
	// Open opens (creating it if absent) the database at path. The parent
	// directory exists. The returned DB is used by one goroutine at a time.
	Open(ctx context.Context, path string, opts Options) (DB, error)
}

// Options are the limits of one database. Zero values mean the defaults.
type Options struct {
	MaxDatabaseBytes int64         // 1 GB: past it writes fail with quota-exceeded; reads still work
	MaxValueBytes    int           // 16 MB per text or blob value; at most 1e9 (SQLite's own ceiling)
	MaxResultBytes   int           // 16 MB per query result, encoded
	SQLCPUPerEvent   time.Duration // 2 s of SQL CPU per event, all statements together
	WritePerEvent    int64         // 256 MB written per event, counting every page rewrite
}

// Defaults fills zero fields with the book's defaults.
func (o Options) Defaults() Options {
	if o.MaxDatabaseBytes == 0 {
		o.MaxDatabaseBytes = 1 << 30
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = 16 << 20
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = 16 << 20
	}
	if o.SQLCPUPerEvent == 0 {
		o.SQLCPUPerEvent = 2 * time.Second
	}
	if o.WritePerEvent == 0 {
		o.WritePerEvent = 256 << 20
	}
	return o
}

// DB is one actor's database, as its guest sees it: every statement goes
// through the sandbox. A statement runs on the calling goroutine; when ctx is
// done (the event's wall clock) it stops with quota-exceeded.
type DB interface {
	// Exec runs one statement that returns no rows and returns the number of
	// rows it changed. With Durable it follows exec-durable's rules (inside a
	// transaction only COMMIT or END; outside one no BEGIN or SAVEPOINT) and
	// returns once the commit is durable on this machine (fsynced).
	Exec(ctx context.Context, sql string, params []abi.Value, opts ExecOptions) (int64, error)
	// Query runs one statement and appends its result set to w (which the
	// kernel copies into the guest as it stands). A failed Query leaves
	// w.Buf as it was. Every value round-trips byte for byte, except a NaN
	// real, which SQLite stores as NULL.
	Query(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) error
	// HostExec and HostQuery run a statement as the host, outside the guest
	// sandbox, so they reach the host tables (_wasmkeep_*), which guests can
	// neither see nor touch. They join the guest's open transaction, if any,
	// so host state the event changes (its alarm) commits or rolls back with
	// the event's own writes.
	HostExec(ctx context.Context, sql string, params ...abi.Value) (int64, error)
	HostQuery(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) error
	// InTransaction reports whether a transaction is open (BEGIN without its
	// COMMIT or ROLLBACK yet).
	InTransaction() bool
	// EndEvent closes the current event: a transaction still open is rolled
	// back and the per-event budgets start again.
	EndEvent(ctx context.Context) error
	// Close closes the database cleanly (any open transaction rolled back).
	Close() error
}

// ExecOptions modify Exec.
type ExecOptions struct {
	Durable bool
}

// Error is a statement's failure, as the guest receives it.
type Error struct {
	Kind    abi.SQLErrorKind
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }

// Errorf builds an *Error.
func Errorf(kind abi.SQLErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// KindOf is the sql-error kind of err: its *Error's kind, or internal.
func KindOf(err error) abi.SQLErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return abi.SQLInternal
}

// Replicator is the part of storage/v1 the replication protocol (a later
// issue) will use, implemented by a DB (on its own connection: a database
// is opened once per process); single-node servers never call it, so a
// driver may leave it out until then. The kernel owns the protocol (what is uploaded, when,
// and the acknowledgement rule); the driver owns reading its own files.
type Replicator interface {
	// Capture calls page for every page committed since the previous
	// capture, each page once with its newest contents, in ascending page
	// order, then returns the database's size in pages after the capture
	// and its page size. It captures only whole transactions.
	Capture(ctx context.Context, page func(pgno uint32, data []byte) error) (CaptureInfo, error)
	// Checkpoint folds captured changes into the main database file so the
	// log does not grow without bound; uncaptured changes stay capturable.
	Checkpoint(ctx context.Context) error
}

// CaptureInfo describes a capture.
type CaptureInfo struct {
	PageSize uint32
	Pages    uint32 // the database's size in pages after the captured commits
	Changed  int    // pages passed to the callback
}

// Capabilities are SQL features guests may use that depend on how a
// driver's SQLite was compiled. A driver that implements CapabilityLister
// declares those it offers; conformance/storagetest tests every declared one
// and skips, saying why, every one it does not declare. fts5 and rtree are
// not optional: every storage/v1 driver must offer them.
const (
	CapFTS3              = "fts3"                // CREATE VIRTUAL TABLE ... USING fts3
	CapFTS4              = "fts4"                // ... USING fts4
	CapFTS5              = "fts5"                // ... USING fts5 (required)
	CapRTree             = "rtree"               // ... USING rtree (required)
	CapMath              = "math"                // sqrt, pow, ln, sin, ...
	CapSoundex           = "soundex"             // soundex()
	CapOffset            = "sqlite_offset"       // sqlite_offset()
	CapUpdateDeleteLimit = "update_delete_limit" // UPDATE and DELETE with ORDER BY and LIMIT
	CapStat4             = "stat4"               // ANALYZE keeps sqlite_stat4
	CapLikeBlobs         = "like_blobs"          // LIKE and GLOB match blobs as text
)

// CapabilityLister is an optional interface of a Driver.
type CapabilityLister interface {
	Capabilities() []string
}
