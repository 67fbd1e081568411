// Package replication is an actor's replication protocol (book ADR 0007,
// 0012, 0028 section 1) as logic over a bucket, a clock, the open database's
// storage.Replicator and the storage.Driver that restores it: one Stream
// per hold, which ships one LTX segment per capture under the
// acknowledgement rule, takes periodic snapshots and collects the history
// they make unnecessary; the start of a hold (Open), which restores the
// actor from the bucket unless its local database already is the bucket's
// head; and a delete's reset and erasure. It imports no plugin, opens no
// connection and reads no wall clock, so the server and a simulation run
// the same code. ADR 1026 records what the book left open.
package replication

import (
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The book's numbers (Running a cluster: Replication; ADR 0007, 0012).
const (
	// SnapshotSegments and SnapshotBytes: a periodic snapshot is due once
	// this many segments, or this many bytes of them, were written since
	// the last snapshot (either).
	SnapshotSegments = 64
	SnapshotBytes    = 64 << 20

	// An upload's attempt is given up after UploadAttempt plus a second per
	// started megabyte (the next attempt after twice that), at most
	// UploadAttempts attempts, the whole upload within UploadTotal plus
	// that second per megabyte.
	UploadAttempt  = 5 * time.Second
	UploadAttempts = 3
	UploadTotal    = 20 * time.Second
	// SnapshotAttemptMax bounds a periodic snapshot's one attempt.
	SnapshotAttemptMax = 10 * time.Second
	// SnapshotRetryWait is the least time between two tries of a periodic
	// snapshot after one failed.
	SnapshotRetryWait = 30 * time.Second

	// A restore's read is given up when the bucket stays silent for
	// ReadSilence (no answer, no next chunk of a body, no next page of a
	// listing), or once it took ReadSilence plus a second per started
	// megabyte read alongside it on the node; it is sent again, ReadTries
	// tries in all.
	ReadSilence = 5 * time.Second
	ReadTries   = 3
	// A restore reads up to ReadAhead objects ahead of the one it applies,
	// within ReadAheadBytes of them by the listing's sizes (always one).
	ReadAhead      = 8
	ReadAheadBytes = 32 << 20
	// RestoreDeadline is the base of a restore's deadline for its reads:
	// plus a second per started megabyte it reads and a second per eight
	// objects, counted only while it waits for the object it applies next.
	RestoreDeadline = 30 * time.Second

	// DeleteBatch is how many deletes a collection pass sends between two
	// checks of the hold.
	DeleteBatch = 100
	// EraseTries is how many passes a delete's erasure makes while the
	// bucket refuses.
	EraseTries = 3
)

// ReadPauses are the pauses before a read refused with an error a resend
// may get past is sent again (restore step 7).
var ReadPauses = [ReadTries - 1]time.Duration{500 * time.Millisecond, time.Second}

var (
	// ErrDone: the stream ended (a failed or late upload, a failed
	// capture after its position moved, Close): the caller stops acting
	// as owner, releases the hold and drops the instance.
	ErrDone = errors.New("replication: the stream has ended")
	// ErrLate: the upload completed after the hold ended; it is not
	// acknowledged (it may still be the state: a late commit).
	ErrLate = errors.New("replication: the upload completed after the hold ended")
	// ErrUnknown: the upload failed or was cut and may have landed; the next
	// owner's restore decides.
	ErrUnknown = errors.New("replication: the upload's outcome is unknown")
	// ErrExists: the key already holds an object this stream did not
	// write (no hold writes another's generation: a reused generation).
	ErrExists = errors.New("replication: the key already exists")
	// ErrDeadline: a restore's reads ran past its deadline (restore step
	// 7); the restore failed and changed nothing.
	ErrDeadline = errors.New("replication: the restore's reads ran past their deadline")
	// ErrBehind: a hold's start refused because the actor's history holds
	// a generation above the hold's (ownership.Config.Floor keeps a first
	// acquisition above it).
	ErrBehind = errors.New("replication: the hold's generation is below the history's")
	// ErrDeleted: the actor was deleted by this stream (Reset); nothing
	// more is shipped for this hold.
	ErrDeleted = errors.New("replication: the actor was deleted")
)

// Metrics are the hooks the caller counts with (the book's Monitoring
// chapter); a nil func is not called.
type Metrics struct {
	// DurableWrite: one acknowledged segment, from its capture to its
	// acknowledgement (wasmkeep_durable_write_seconds).
	DurableWrite func(time.Duration)
	// Restore: one hold's start (Open), with its error (restore seconds
	// and wasmkeep_restore_failures_total).
	Restore func(time.Duration, error)
	// SnapshotFailure: a snapshot upload not acknowledged
	// (wasmkeep_snapshot_upload_failures_total).
	SnapshotFailure func()
	// Collected: objects a collection pass deleted
	// (wasmkeep_history_collected_total).
	Collected func(int)
	// CollectFailure: a collection pass that failed
	// (wasmkeep_history_collect_failures_total).
	CollectFailure func()
	// RestoreRead: one object a restore read, from its first try to its
	// bytes, retries and waits for the node's read limit included
	// (wasmkeep_restore_read_seconds).
	RestoreRead func(time.Duration)
}

func (m *Metrics) restoreRead(d time.Duration) {
	if m.RestoreRead != nil {
		m.RestoreRead(d)
	}
}

func (m *Metrics) durableWrite(d time.Duration) {
	if m.DurableWrite != nil {
		m.DurableWrite(d)
	}
}

func (m *Metrics) restore(d time.Duration, err error) {
	if m.Restore != nil {
		m.Restore(d, err)
	}
}

func (m *Metrics) snapshotFailure() {
	if m.SnapshotFailure != nil {
		m.SnapshotFailure()
	}
}

func (m *Metrics) collected(n int) {
	if m.Collected != nil && n > 0 {
		m.Collected(n)
	}
}

func (m *Metrics) collectFailure() {
	if m.CollectFailure != nil {
		m.CollectFailure()
	}
}

// Config is what New needs.
type Config struct {
	Bucket bucket.Bucket
	Clock  clock.Clock
	// Driver, Root and Options open and restore the actors' databases
	// (Options.Replication is set by Open).
	Driver  storage.Driver
	Root    string
	Options storage.Options
	// TempDir is where a restore builds the database before the driver
	// takes it in: a directory of the kernel's own (under the data root).
	TempDir string
	// Retention is --history-retention-secs (history.DefaultRetention by
	// default; 0 collects as soon as the rule allows).
	Retention time.Duration
	// Reads is the node's limit on restore reads, one for every restore of
	// the node (nil: a limiter of its own with the book's caps).
	Reads   *Limiter
	Metrics Metrics
}

// Replicas is a node's replication: the restores and streams of its holds,
// and what it remembers of failed snapshots while an actor is idle.
type Replicas struct {
	cfg   Config
	waits *snapshotWaits
}

// New checks cfg and returns the node's Replicas.
func New(cfg Config) (*Replicas, error) {
	switch {
	case cfg.Bucket == nil:
		return nil, errors.New("replication: no bucket")
	case cfg.Clock == nil:
		return nil, errors.New("replication: no clock")
	case cfg.Driver == nil:
		return nil, errors.New("replication: no storage driver")
	case cfg.Root == "" || cfg.TempDir == "":
		return nil, errors.New("replication: no data root or temporary directory")
	case cfg.Retention < 0:
		return nil, fmt.Errorf("replication: a negative retention %s", cfg.Retention)
	}
	if cfg.Reads == nil {
		cfg.Reads = NewLimiter(NodeReads, NodeReadBytes)
	}
	return &Replicas{cfg: cfg, waits: newSnapshotWaits()}, nil
}

// Actor is the history's name of an address.
func Actor(addr abi.Address) history.Actor {
	return history.Actor{Tenant: addr.Tenant, Class: addr.Class, Name: addr.Name}
}

// mb is the number of started megabytes in n bytes.
func mb(n int64) time.Duration {
	return time.Duration((n + 1<<20 - 1) >> 20)
}
