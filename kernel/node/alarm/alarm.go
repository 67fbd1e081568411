// Package alarm owns actors' alarms apart from the guest ABI: the alarm row
// each actor keeps in its own database (its host table, the retry backoff),
// the node's schedule of due times (a heap its timer waits on), and the
// alarm index, the kernel's file a start reads instead of opening every
// database (ADR 1018). What needs the node, delivering a due alarm, is
// passed in as a function; the databases are reached through the storage
// contract.
package alarm

import (
	"context"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// An actor's pending alarm lives in its own database (so it survives
// hibernation and restarts, and commits or rolls back with the event that
// set it), in a host table guests cannot see. failures counts the on-alarm
// attempts that failed in a row: while they are retried, at is the next
// attempt's time, which get-alarm returns.
const table = "_wasmkeep_alarm"

// CreateTable is the statement that creates the alarm's host table in a
// database that lacks it.
const CreateTable = "CREATE TABLE IF NOT EXISTS " + table + " (id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL, failures INTEGER NOT NULL)"

const retryFirst = time.Second

// RetryMax is the longest backoff: a failed on-alarm's, and the wait
// before an index entry the rules left standing is delivered again.
const RetryMax = 5 * time.Minute

func integer(i int64) abi.Value { return abi.Value{Kind: abi.KindInteger, Int: i} }

// Read returns the pending alarm (ms since the epoch) and its failure
// count; ok is false if there is none.
func Read(ctx context.Context, db storage.DB) (at, failures int64, ok bool, err error) {
	var w abi.RowsWriter
	if err := db.HostQuery(ctx, "SELECT at, failures FROM "+table, nil, &w); err != nil {
		return 0, 0, false, err
	}
	r := abi.NewReader(w.Buf)
	if _, n := r.Columns(); n == 0 {
		return 0, 0, false, r.Err()
	}
	at, failures = r.Value().Int, r.Value().Int
	return at, failures, true, r.Err()
}

// Set makes at (ms since the epoch) the pending alarm, with no failures.
func Set(ctx context.Context, db storage.DB, at int64) error {
	_, err := db.HostExec(ctx, "INSERT INTO "+table+" (id, at, failures) VALUES (1, ?, 0) ON CONFLICT (id) DO UPDATE SET at = excluded.at, failures = 0", integer(at))
	return err
}

// Clear removes the pending alarm.
func Clear(ctx context.Context, db storage.DB) error {
	_, err := db.HostExec(ctx, "DELETE FROM "+table)
	return err
}

// Done removes the alarm that ran (at, after failures), unless the event
// set another meanwhile.
func Done(ctx context.Context, db storage.DB, at, failures int64) error {
	_, err := db.HostExec(ctx, "DELETE FROM "+table+" WHERE at = ? AND failures = ?", integer(at), integer(failures))
	return err
}

// Retry counts a failed attempt of the alarm at, which had failed failures
// times in a row before it (as read before the handler ran, book ADR 0009,
// decision 3). An alarm the handler left at that time or earlier (the one
// that ran, the same time set again) moves to the next attempt, RetryDelay
// after now. One it set for another time stands, but no sooner than
// RetryFloor from now, so a handler that sets its alarm for now and fails
// does not fire itself in a tight loop; this keeps the SDK's workflows'
// own watchdog, whose backoff may start below the book's second (the
// book moves such an alarm to the retry time too). A clear stands. The
// count goes on from failures: a set inside the failed run resets
// nothing, so a handler that reschedules itself and fails still backs off.
func Retry(ctx context.Context, db storage.DB, at, failures int64, now time.Time) error {
	next := now.Add(RetryDelay(failures + 1)).UnixMilli()
	_, err := db.HostExec(ctx, "UPDATE "+table+" SET at = CASE WHEN at <= ? THEN ? ELSE max(at, ?) END, failures = ?",
		integer(at), integer(next), integer(now.Add(RetryFloor).UnixMilli()), integer(failures+1))
	return err
}

// RetryFloor is the soonest a failed on-alarm's handler-set alarm fires.
const RetryFloor = 100 * time.Millisecond

// RetryDelay is the wait before attempt n+1 after n failures in a row: 1 s,
// doubling up to 5 min.
func RetryDelay(failures int64) time.Duration {
	d := retryFirst
	for i := int64(1); i < failures && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}
