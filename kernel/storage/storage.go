// Package storage is the contract between the kernel and an actor's SQL
// database (storage/v2). The kernel owns when a database opens and closes,
// the event boundaries and what a durable write means in a cluster; a storage
// plugin owns the SQL engine, its sandbox, its quotas, the durable local
// commit and the actor's files: where they live under the data root, what
// they are called, how they are removed and how one takes another's place.
// The kernel names an actor by its address, never by a file.
//
// conformance/storagetest holds the rules every implementation must pass.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// API is the contract version a storage plugin declares.
//
// storage/v2 (from storage/v1): the driver takes an actor's address and a
// data root instead of a file path (Open), and answers Exists, Remove,
// Restore, Snapshot and Walk; every DB is a Replicator (capture and
// checkpoint for replication, Options.Replication). v2 absorbed the required
// Replicator on the day it was introduced, before any release: no plugin
// outside this repository could implement v2 yet (ADR 1022).
const API = "storage/v2"

// Driver is what a storage plugin's New returns. Every method takes the data
// root (a directory the kernel owns: the app's state directory under
// --data-dir, <data-dir>/state/<tenant>/<app>/) and an actor's address
// (tenant, class and name, valid by the kernel's rules: the name 1 to 256
// bytes without / or control characters, other than . and ..); how the
// driver lays the actor's files out under root is its own business, the
// same for the same address from one start to the next. A database is open
// at most once per process: while it is, Open, Remove, Restore and Snapshot
// of the same actor fail with ErrOpen.
type Driver interface {
	// Open opens the actor's database, creating it (and the directories it
	// needs) if absent. The returned DB is used by one goroutine at a time.
	Open(ctx context.Context, root string, addr abi.Address, opts Options) (DB, error)
	// Exists reports whether the actor has a database under root.
	Exists(ctx context.Context, root string, addr abi.Address) (bool, error)
	// Remove deletes the actor's database and every file the driver keeps
	// for it, the replaced one (Restore) included, durably: the removal
	// survives a crash once Remove returns. An absent actor is not an
	// error: a retry removes what is left.
	Remove(ctx context.Context, root string, addr abi.Address) error
	// Restore replaces the actor's database with the one read from src (a
	// whole database file, as Snapshot writes them), keeping the database
	// it replaces, if any, under root in one file whose name ends in
	// ".replaced", from which an operator can restore it: one generation,
	// a second Restore overwrites the first one's. The new database is written and
	// synced beside the old one and checked before it takes the old one's
	// place in one atomic step, so a crash or a failure at any point leaves
	// the actor with either its old database or the new one, never neither
	// and never a mix. An error leaves the old one in use.
	Restore(ctx context.Context, root string, addr abi.Address, src io.Reader) error
	// Snapshot writes the actor's database, which must not be open, to w as
	// one whole file of the kind Restore reads, everything it committed
	// included. An absent actor is an error matching fs.ErrNotExist.
	Snapshot(ctx context.Context, root string, addr abi.Address, w io.Writer) error
	// Walk opens, one after another, every actor database of the tenant
	// under root, of every class, and calls fn with each; the database is
	// closed when fn returns. A database that cannot be opened is passed
	// with Err set and no DB, and the walk goes on. fn's error stops the
	// walk and is returned. No actor of the tenant may be open meanwhile.
	Walk(ctx context.Context, root, tenant string, opts Options, fn func(Found) error) error
}

// ErrOpen is what Open, Remove, Restore and Snapshot return for an actor whose
// database is open in this process.
var ErrOpen = errors.New("the actor's database is open")

// Found is one database Walk came upon.
type Found struct {
	Class string
	Where string // where it lives, for logs; not an address
	DB    DB     // open until fn returns; nil when Err is set
	Err   error  // why it could not be opened
}

// Options are the limits of one database, and how a new one starts. Zero
// values mean the defaults.
type Options struct {
	MaxDatabaseBytes int64         // 1 GB: past it writes fail with quota-exceeded; reads still work
	MaxValueBytes    int           // 16 MB per text or blob value; at most 1e9 (SQLite's own ceiling)
	MaxResultBytes   int           // 16 MB per query result, encoded
	SQLCPUPerEvent   time.Duration // 2 s of SQL CPU per event, all statements together
	WritePerEvent    int64         // 256 MB written per event, counting every page rewrite
	// Replication opens the database for replication (Replicator): no
	// automatic checkpoint and none at Close. Without it the driver
	// checkpoints automatically, so a single node's log stays bounded.
	// With it, exec-durable keeps its rules but the driver need not sync
	// its commit: the kernel makes it durable by shipping it to the bucket,
	// the durable copy (book: "Replication"), and a local file is trusted
	// again only once checked against the bucket's head.
	Replication bool
	// Prepare is how a database Open creates starts; a driver may ignore it
	// (see Preparation).
	Prepare Preparation
}

// Preparation is what every database Open creates starts with, an optional
// capability of a driver: one that honours it runs Statements on a database
// it creates before Open returns it, never on one Open finds; one that
// ignores it leaves that to the kernel, which runs the statements itself
// after every Open (they are idempotent: CREATE ... IF NOT EXISTS) but
// one whose DB reports it Created. The
// point is a new actor's first request: a driver may, rather than run the
// statements on every new database, prepare one database with them once (a
// template) and copy it, provided the copy cannot be told apart from a
// database the statements built (schema, pragmas, page size, header).
type Preparation struct {
	// Statements are run as the host (HostExec), in order, each its own
	// transaction; they take no parameters and hold nothing particular to
	// one actor (its name, say): the kernel writes that after Open.
	Statements []string
	// CacheDir, when set, is a directory the driver may keep what it
	// prepared in across restarts, in a directory of its own under it. An
	// entry that is missing, stale (other statements, another SQLite) or
	// unreadable must be made again, never used.
	CacheDir string
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
// through the sandbox. A statement runs on the calling goroutine, which the
// caller locks to its thread for the event (the SQL CPU budget reads that
// thread's CPU clock); when ctx is done (the event's wall clock) it stops
// with quota-exceeded.
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

	Replicator
}

// Created is an optional interface of a DB: Created reports whether the
// Open that returned it created the database, as Options.Prepare says (its
// statements run, or a template of them copied), so that nothing else is
// in it yet. The kernel then skips what it otherwise runs after every
// Open: the preparation's statements again and the reads of its host
// rows, which cannot be there (ADR 1069). A driver without it, or that
// ignores Options.Prepare, answers false (CreatedByOpen).
type Created interface {
	Created() bool
}

// CreatedByOpen reports whether db says its Open created it (Created).
func CreatedByOpen(db DB) bool {
	c, ok := db.(Created)
	return ok && c.Created()
}

// Syncer is an optional interface of a DB (the kernel does without it): Sync
// returns once every commit so far is durable on this machine, as
// exec-durable's is. The kernel calls it before a file of its own stops
// recording what the database committed (the alarm index forgetting an
// alarm), so that a machine crash cannot keep the one and lose the other.
// Without it, that holds for a crash of the process only.
type Syncer interface {
	Sync(ctx context.Context) error
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

// Replicator is the storage side of replication (book ADR 0007's capture),
// required of every storage/v2 DB: the kernel owns the protocol (segments,
// transaction ids, checksums, uploads, the acknowledgement rule), the driver
// owns reading its own log. It is meant for a database opened with
// Options.Replication: with it, the driver never checkpoints on its own (not
// automatically, not at Close), so a commit leaves the log only through
// Checkpoint, after its capture; without it, automatic checkpoints keep the
// log bounded and Capture fails. Only whole committed transactions are
// captured: never an open transaction's pages, never a rolled-back one's,
// never a torn tail. Capture and Checkpoint run on the DB's goroutine,
// between statements.
type Replicator interface {
	// Capture calls page for every page that the transactions committed
	// since the previous capture changed, each page once with its newest
	// contents, in ascending page order and none past the database's size
	// after them, then moves its position past those transactions. data is
	// PageSize bytes, valid until page returns. An error (page's included)
	// leaves the position where it was: the next Capture returns the same
	// transactions again, and any committed since. A database just opened
	// starts at the beginning of its log: every commit not yet
	// checkpointed is captured again, so the kernel, which knows what it
	// shipped, checkpoints before it closes one. A capture with
	// Transactions 0 holds no page.
	Capture(ctx context.Context, page func(pgno uint32, data []byte) error) (CaptureInfo, error)
	// CaptureAll is Capture that calls page for every page of the database
	// as its last committed transaction leaves it (1 to Pages, except
	// SQLite's lock page, which no database stores), what a first segment
	// or a snapshot holds; its position moves as Capture's does.
	CaptureAll(ctx context.Context, page func(pgno uint32, data []byte) error) (CaptureInfo, error)
	// Checkpoint folds the log into the database file and truncates it
	// (SQLite's TRUNCATE checkpoint), once the kernel has shipped what it
	// captured. Uncaptured commits are never folded away: while the log
	// holds a commit past the capture position, or a transaction is open,
	// Checkpoint does nothing and returns nil (a later one, after the next
	// capture, does it). Without Options.Replication there is nothing to
	// capture: it checkpoints unless a transaction is open.
	Checkpoint(ctx context.Context) error
}

// CaptureInfo describes a capture.
type CaptureInfo struct {
	PageSize uint32
	Pages    uint32 // the database's size in pages after the captured commits
	Changed  int    // pages passed to the callback
	// Transactions is how many committed transactions the capture holds;
	// 0 means nothing committed since the previous capture (the kernel
	// writes no segment). The kernel numbers its segments itself, one per
	// capture: a capture of several transactions is one segment.
	Transactions int
}

// Capabilities are SQL features guests may use that depend on how a
// driver's SQLite was compiled. A driver that implements CapabilityLister
// declares those it offers; conformance/storagetest tests every declared one
// and skips, saying why, every one it does not declare. fts5 and rtree are
// not optional: every storage/v2 driver must offer them.
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
