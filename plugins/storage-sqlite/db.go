package sqlitestorage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cputime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

var (
	_ storage.DB      = (*db)(nil)
	_ storage.Syncer  = (*db)(nil)
	_ storage.Created = (*db)(nil)
)

// db is one actor's database on one SQLite connection in WAL mode.
type db struct {
	c        conn
	path     string
	opts     storage.Options
	pageSize int64

	guest, host *stmtCache
	vals        []abi.Value // one result row, reused

	// The statement being prepared or run, for the hooks, which SQLite calls
	// on this goroutine.
	hostStmt bool            // run as the host: no sandbox, no CPU budget
	done     <-chan struct{} // the statement's ctx.Done()
	denied   string          // why the authorizer refused it
	prep     struct {        // what the authorizer saw while compiling it
		kind   txKind
		dml    bool
		schema bool // creates or alters a table, index, view or trigger
	}

	// The running guest statement's SQL CPU (see progress). cpuOver is set,
	// from the watch's goroutine, once it spends what is left of the event's
	// budget.
	started time.Time // since when its wall time is not yet in cpuUsed
	watch   *cputime.Watch
	cpuOver atomic.Bool

	// The watchdog (see beginGuest): what the CPU watch's and the
	// deadline's goroutines need to interrupt the guest statement that is
	// being prepared or run, and only that one.
	mu           sync.Mutex
	running      bool            // a guest statement is being prepared or run
	gen          uint64          // counts guest statements
	deadlineDone <-chan struct{} // the ctx.Done() the deadline watch is for
	stopDeadline func() bool     // ends the deadline watch; nil if none

	// The current event. cpuUsed is its SQL CPU so far, or more (see
	// spent); thread watches the thread of its guest statements since the
	// event began (the caller's watch, cputime.FromContext) or else since
	// its first guest statement; nil before that.
	cpuUsed  time.Duration
	cpuSpent bool // the budget was found spent: no later clock read undoes it
	thread   *cputime.Watch
	written  int64 // bytes written to the log
	aborted  bool  // a failure rolled the event's transaction back

	wal       *os.File // the WAL, opened at the first durable write or capture
	file      *os.File // the database file, opened at the first CaptureAll
	capture   capturePos
	dirSynced bool
	closed    bool
	release   func() // gives up the claim on path (files.go); nil if none
	created   bool   // this Open created the database (storage.Created)
}

// Created reports whether the Open that returned d created its database
// as Options.Prepare says (storage.Created).
func (d *db) Created() bool { return d.created }

var errClosed = storage.Errorf(abi.SQLInternal, "the database is closed")

// open opens the database at path, locked by lockFD already unless it is -1
// (openFile); likeBlobs says whether b's LIKE and GLOB match blobs (the
// like_blobs capability).
func open(b binding, path string, lockFD int, opts storage.Options, synchronous string, cacheSize int, likeBlobs bool) (*db, error) {
	c, err := openFile(b, path, lockFD)
	if err != nil {
		return nil, err
	}
	d := &db{c: c, path: path, opts: opts, guest: newStmtCache(cacheSize), host: newStmtCache(cacheSize)}
	if err := d.setup(synchronous, likeBlobs); err != nil {
		c.close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return d, nil
}

// setup hardens the connection and sets the modes and limits the sandbox
// and the quotas rest on.
func (d *db) setup(synchronous string, likeBlobs bool) error {
	for _, cfg := range []struct {
		op int
		on bool
	}{{configDefensive, true}, {configTrustedSchema, false}, {configEnableLoadExtension, false}} {
		if err := d.c.configure(cfg.op, cfg.on); err != nil {
			return err
		}
	}
	d.c.setLimit(limitLength, d.opts.MaxValueBytes)
	d.c.setLimit(limitAttached, 0)
	if err := d.c.setHooks(d.authorize, d.progress); err != nil {
		return err
	}
	if err := registerGuestFuncs(d.c, likeBlobs); err != nil {
		return err
	}
	d.hostStmt = true
	// One connection owns the file: holding its locks for good spares a
	// read transaction the system calls that take and release them, and
	// keeps the WAL index in memory (no -shm file). It must precede WAL.
	lock, err := d.pragma("PRAGMA locking_mode=EXCLUSIVE")
	if err != nil {
		return err
	}
	if !strings.EqualFold(string(lock.Bytes), "exclusive") {
		return fmt.Errorf("SQLite refused exclusive locking (locking_mode is %q)", lock.Bytes)
	}
	mode, err := d.pragma("PRAGMA journal_mode=WAL")
	if err != nil {
		return err
	}
	if !strings.EqualFold(string(mode.Bytes), "wal") {
		return fmt.Errorf("SQLite refused WAL mode (journal_mode is %q)", mode.Bytes)
	}
	if _, err := d.pragma("PRAGMA synchronous=" + synchronous); err != nil {
		return err
	}
	// Replication (storage.Replicator): commits leave the log only through
	// Checkpoint, after their capture, so no automatic checkpoint and none
	// at close. Otherwise SQLite's default, set here so that no build
	// option changes it: a checkpoint once the log passes 1000 pages.
	autoCkpt := "PRAGMA wal_autocheckpoint=1000"
	if d.opts.Replication {
		if err := d.c.configure(configNoCkptOnClose, true); err != nil {
			return err
		}
		autoCkpt = "PRAGMA wal_autocheckpoint=0"
	}
	if _, err := d.pragma(autoCkpt); err != nil {
		return err
	}
	size, err := d.pragma("PRAGMA page_size")
	if err != nil {
		return err
	}
	d.pageSize = size.Int
	_, err = d.pragma(fmt.Sprintf("PRAGMA max_page_count=%d", max(1, d.opts.MaxDatabaseBytes/d.pageSize)))
	return err
}

// pragma runs a setup statement and returns the first column of its first
// row.
func (d *db) pragma(sql string) (abi.Value, error) { return pragmaOn(d.c, sql) }

// stepValue steps s once and returns the first column of its row (Bytes
// copied), or no value if it has none.
func stepValue(s stmt) (abi.Value, error) {
	row, err := s.step()
	if err != nil || !row {
		return abi.Value{}, err
	}
	v := s.column(0)
	v.Bytes = append([]byte(nil), v.Bytes...)
	return v, nil
}

func (d *db) Exec(ctx context.Context, sql string, params []abi.Value, opts storage.ExecOptions) (int64, error) {
	return d.guestRun(ctx, sql, params, nil, opts.Durable)
}

func (d *db) Query(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) error {
	_, err := d.guestRun(ctx, sql, params, w, false)
	return err
}

func (d *db) HostExec(ctx context.Context, sql string, params ...abi.Value) (int64, error) {
	return d.hostRun(ctx, sql, params, nil)
}

func (d *db) HostQuery(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) error {
	_, err := d.hostRun(ctx, sql, params, w)
	return err
}

func (d *db) InTransaction() bool { return !d.closed && d.c.inTx() }

func (d *db) EndEvent(context.Context) error {
	if d.closed {
		return errClosed
	}
	var err error
	if d.c.inTx() {
		err = d.rollback()
	}
	d.cpuUsed, d.cpuSpent, d.thread, d.written, d.aborted = 0, false, nil, 0, false
	d.endDeadlineWatch()
	d.c.rest()
	return err
}

func (d *db) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	d.endDeadlineWatch()
	d.guest.finalizeAll()
	d.host.finalizeAll()
	err := d.c.close() // rolls back an open transaction, then unlocks (filelock.go)
	if d.wal != nil {
		err = errors.Join(err, d.wal.Close())
	}
	if d.file != nil {
		err = errors.Join(err, d.file.Close())
	}
	if d.release != nil {
		d.release()
	}
	return err
}

// guestRun runs one guest statement through the sandbox and the event's
// budgets; w is nil for Exec.
func (d *db) guestRun(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter, durable bool) (int64, error) {
	if d.closed {
		return 0, errClosed
	}
	d.hostStmt, d.denied = false, ""
	if d.thread == nil {
		// The kernel's watch has read the thread's clock already: reading
		// it again would cost a system call per event.
		if d.thread = cputime.FromContext(ctx); d.thread == nil {
			d.thread = cputime.Start(0, nil)
		}
	}
	d.beginGuest(ctx)
	refuse := func(err error) (int64, error) {
		d.endGuest()
		return 0, err
	}
	e, err := d.prepare(ctx, d.guest, sql)
	if err != nil {
		return refuse(err)
	}
	if d.aborted {
		if e.kind == txRollback {
			return refuse(nil) // what already happened
		}
		return refuse(storage.Errorf(abi.SQLNotAllowed, "a failure rolled back this event's transaction; only ROLLBACK runs until the event ends"))
	}
	if err := d.checkBudgets(ctx, e); err != nil {
		return refuse(err)
	}
	inTx := d.c.inTx()
	if durable {
		if err := durableRefusal(e.kind, inTx); err != nil {
			return refuse(err)
		}
	}
	if err := d.bind(e, params); err != nil {
		return refuse(err)
	}
	d.done = ctx.Done()
	d.cpuOver.Store(false)
	d.started, d.watch = time.Now(), nil
	n, err := d.run(e, w)
	d.endGuest()
	d.cpuUsed += d.statementCPU()
	// Stopped by its CPU watch: the event's budget is spent, whichever
	// thread's clock a later check reads (a caller whose goroutine is not
	// locked may be found on the event's first thread, whose clock missed
	// the statement's CPU).
	d.cpuSpent = d.cpuSpent || d.cpuOver.Load()
	d.written += d.c.pagesWritten() * d.pageSize
	if err != nil {
		return 0, d.failed(ctx, err, inTx)
	}
	// With replication the bucket is the durable copy: the kernel ships
	// the commit, and a local sync would only add to the write's time.
	if durable && !d.opts.Replication {
		if err := d.syncLog(); err != nil {
			return 0, storage.Errorf(abi.SQLInternal, "committed, but could not make it durable: %v", err)
		}
	}
	return n, nil
}

// hostRun runs a host statement: no sandbox and no budgets, on the same
// connection, so it joins the guest's open transaction.
func (d *db) hostRun(ctx context.Context, sql string, params []abi.Value, w *abi.RowsWriter) (int64, error) {
	if d.closed {
		return 0, errClosed
	}
	d.hostStmt, d.denied = true, ""
	e, err := d.prepare(ctx, d.host, sql)
	if err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, storage.Errorf(abi.SQLQuotaExceeded, "the event's deadline has passed")
	}
	if err := d.bind(e, params); err != nil {
		return 0, err
	}
	inTx := d.c.inTx()
	d.done = ctx.Done()
	n, err := d.run(e, w)
	d.written += d.c.pagesWritten() * d.pageSize
	if err != nil {
		return 0, d.failed(ctx, err, inTx)
	}
	return n, nil
}

// prepare returns the cached statement for sql, or compiles it (as the host
// or the guest, per d.hostStmt).
//
// Compiling a guest statement spends the event's SQL CPU, whether it
// succeeds or not: its wall time is charged, which its CPU time cannot
// exceed (a clock read per compile, not per statement; see spent). A compile is
// stopped at the deadline by the watchdog's interrupt (SQLite's parser
// checks for one); its CPU is known only once it ends.
func (d *db) prepare(ctx context.Context, cache *stmtCache, sql string) (*entry, error) {
	if e := cache.get(sql); e != nil {
		return e, nil
	}
	if i := strings.IndexByte(sql, 0); i >= 0 {
		return nil, storage.Errorf(abi.SQLSyntax, "the SQL text has a NUL byte at offset %d", i)
	}
	d.prep.kind, d.prep.dml, d.prep.schema = txNone, false, false
	var start time.Time
	if !d.hostStmt {
		// Once a failure has ended the transaction, a statement is
		// compiled to be answered (ROLLBACK) or refused as not-allowed,
		// whatever CPU is left; it runs nothing.
		if err := d.checkTime(ctx); err != nil && (!d.aborted || ctx.Err() != nil) {
			return nil, err
		}
		start = time.Now()
	}
	s, rest, err := d.c.prepare(sql)
	if !d.hostStmt {
		d.cpuUsed += time.Since(start)
	}
	if err != nil {
		var se *sqliteError
		if errors.As(err, &se) && se.code&0xff == rcInterrupt && ctx.Err() != nil {
			return nil, storage.Errorf(abi.SQLQuotaExceeded, "the statement was stopped at the event's deadline while it compiled")
		}
		return nil, d.sqlError(err)
	}
	if s == nil {
		return nil, storage.Errorf(abi.SQLSyntax, "the SQL text holds no statement")
	}
	if !blank(rest) {
		s.finalize()
		return nil, storage.Errorf(abi.SQLMultipleStatements, "the SQL text holds more than one statement (the second starts at %q); send one per call", clip(strings.TrimLeft(rest, " \t\r\n;")))
	}
	if !d.hostStmt && d.prep.schema && mentionsHost(sql) {
		s.finalize()
		return nil, storage.Errorf(abi.SQLNotAllowed, "a schema statement may not name a host table (names starting with %s)", hostPrefix)
	}
	// The key is copied: a caller may pass a string over a buffer it reuses.
	e := &entry{sql: strings.Clone(sql), s: s, kind: d.prep.kind, readonly: s.readonly(), dml: d.prep.dml, params: s.params()}
	if old := cache.put(e); old != nil {
		old.s.finalize()
	}
	return e, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// checkBudgets refuses a guest statement once the event has spent its
// deadline or its SQL CPU, or a write once it has written its share.
func (d *db) checkBudgets(ctx context.Context, e *entry) error {
	if err := d.checkTime(ctx); err != nil {
		return err
	}
	if !e.readonly && d.written > d.opts.WritePerEvent {
		return storage.Errorf(abi.SQLQuotaExceeded, "the event wrote %d bytes, past its %d-byte write budget; statements that write are refused until the event ends (split bulk work across events)", d.written, d.opts.WritePerEvent)
	}
	return nil
}

// checkTime refuses a guest statement once the event has spent its
// deadline or its SQL CPU.
func (d *db) checkTime(ctx context.Context) error {
	switch {
	case ctx.Err() != nil:
		return storage.Errorf(abi.SQLQuotaExceeded, "the event's deadline has passed")
	case d.spent():
		return storage.Errorf(abi.SQLQuotaExceeded, "the event spent its %v of SQL CPU; statements are refused until the event ends", d.opts.SQLCPUPerEvent)
	}
	return nil
}

// durableRefusal applies exec-durable's rules before the statement runs.
func durableRefusal(k txKind, inTx bool) error {
	switch {
	case inTx && k != txCommit:
		return storage.Errorf(abi.SQLNotAllowed, "inside a transaction exec-durable takes only COMMIT or END; run the transaction's statements with exec")
	case !inTx && k != txNone && k != txCommit:
		return storage.Errorf(abi.SQLNotAllowed, "exec-durable does not take BEGIN, SAVEPOINT, RELEASE or ROLLBACK; run them with exec")
	}
	return nil
}

func (d *db) bind(e *entry, params []abi.Value) error {
	if len(params) != e.params {
		return storage.Errorf(abi.SQLBind, "the statement takes %d parameters, %d given", e.params, len(params))
	}
	for i, v := range params {
		switch {
		case v.Kind > abi.KindBlob:
			return storage.Errorf(abi.SQLBind, "parameter %d has unknown value kind %d", i+1, v.Kind)
		case len(v.Bytes) > d.opts.MaxValueBytes && (v.Kind == abi.KindText || v.Kind == abi.KindBlob):
			return storage.Errorf(abi.SQLQuotaExceeded, "parameter %d is %d bytes, over the %d-byte limit for a value", i+1, len(v.Bytes), d.opts.MaxValueBytes)
		}
		if err := e.s.bind(i+1, v); err != nil {
			return d.sqlError(err)
		}
	}
	return nil
}

// run steps the bound statement to its end: for Exec (w nil) it returns the
// rows changed, for Query it appends the result set to w.
func (d *db) run(e *entry, w *abi.RowsWriter) (int64, error) {
	defer e.s.reset()
	if w == nil {
		for {
			row, err := e.s.step()
			if err != nil {
				return 0, err
			}
			if !row {
				break
			}
		}
		if !e.dml {
			return 0, nil // SQLite keeps the count of the last INSERT, UPDATE or DELETE
		}
		return d.c.changes(), nil
	}
	start := len(w.Buf)
	row, err := e.s.step()
	if err != nil {
		return 0, err
	}
	names := e.columnNames()
	w.Begin(names)
	for ; row; row, err = e.s.step() {
		vals, size := d.vals[:0], 0
		for i := range names {
			v := e.s.column(i)
			vals = append(vals, v)
			size += encodedSize(v)
		}
		d.vals = vals
		if len(w.Buf)-start+size > d.opts.MaxResultBytes {
			w.Buf = w.Buf[:start]
			return 0, storage.Errorf(abi.SQLQuotaExceeded, "the result passed the %d-byte limit for one query after %d rows; page through it", d.opts.MaxResultBytes, w.Rows())
		}
		w.Row(vals)
	}
	if err != nil {
		w.Buf = w.Buf[:start]
		return 0, err
	}
	return 0, nil
}

// encodedSize is the size of v in the ABI's encoding.
func encodedSize(v abi.Value) int {
	switch v.Kind {
	case abi.KindInteger, abi.KindReal:
		return 1 + 8
	case abi.KindText, abi.KindBlob:
		return 1 + 4 + len(v.Bytes)
	}
	return 1
}

// failed turns a statement's failure into the guest's error and applies the
// book's rule: a failure that ends the open transaction (SQLite rolled it
// back, or the statement was stopped) leaves only ROLLBACK for the rest of
// the event.
func (d *db) failed(ctx context.Context, err error, inTx bool) error {
	var se *sqliteError
	stopped := errors.As(err, &se) && se.code&0xff == rcInterrupt
	switch {
	case stopped && !d.hostStmt && d.cpuOver.Load():
		err = storage.Errorf(abi.SQLQuotaExceeded, "the statement was stopped: it spent the event's %v of SQL CPU", d.opts.SQLCPUPerEvent)
	case stopped && ctx.Err() != nil:
		err = storage.Errorf(abi.SQLQuotaExceeded, "the statement was stopped at the event's deadline")
	case se != nil:
		err = d.sqlError(err)
	}
	if inTx {
		if stopped && d.c.inTx() {
			if rerr := d.rollback(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		d.aborted = !d.c.inTx()
	}
	return err
}

func (d *db) rollback() error {
	_, err := d.hostRun(context.Background(), "ROLLBACK", nil, nil)
	return err
}

// sqlError gives an SQLite failure its sql-error kind.
func (d *db) sqlError(err error) error {
	var se *sqliteError
	if !errors.As(err, &se) {
		return storage.Errorf(abi.SQLInternal, "%v", err)
	}
	code := se.code & 0xff
	switch {
	case d.denied != "" && (code == rcAuth || code == rcError):
		// The authorizer refused something; SQLite reports some refusals
		// (of functions, say) as plain errors.
		return storage.Errorf(abi.SQLNotAllowed, "%s", d.denied)
	case code == rcAuth:
		return storage.Errorf(abi.SQLNotAllowed, "%s", se.msg)
	}
	switch code {
	case rcError:
		return storage.Errorf(abi.SQLSyntax, "%s", se.msg)
	case rcConstraint, rcMismatch:
		return storage.Errorf(abi.SQLConstraint, "%s", se.msg)
	case rcRange:
		return storage.Errorf(abi.SQLBind, "%s", se.msg)
	case rcTooBig:
		return storage.Errorf(abi.SQLQuotaExceeded, "%s (a value may have at most %d bytes)", se.msg, d.opts.MaxValueBytes)
	case rcFull:
		return storage.Errorf(abi.SQLQuotaExceeded, "%s (the database may grow to %d bytes; reads still work)", se.msg, d.opts.MaxDatabaseBytes)
	}
	return storage.Errorf(abi.SQLInternal, "%s", se.msg)
}

// authorize is the authorizer: it records what the statement being compiled
// does, and refuses a guest what the sandbox does not allow.
func (d *db) authorize(action int, arg1, arg2, dbName string) int {
	switch action {
	case authTransaction, authSavepoint:
		d.prep.kind = txKindOf(action, arg1)
	case authInsert, authUpdate, authDelete:
		d.prep.dml = d.prep.dml || !isSchemaTable(arg1)
	case authCreateTable, authCreateIndex, authCreateTrigger, authCreateView, authCreateVTable, authAlterTable:
		d.prep.schema = true
	}
	if d.hostStmt {
		return authOK
	}
	if why := guestRefusal(action, arg1, arg2, dbName); why != "" {
		d.denied = why
		return authDeny
	}
	if action == authAnalyze && isHostTable(arg1) {
		return authIgnore // ANALYZE of the whole database skips the host's tables
	}
	return authOK
}

func isSchemaTable(name string) bool {
	switch strings.ToLower(name) {
	case "sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema":
		return true
	}
	return false
}

// spent reports whether the event has spent its SQL CPU.
//
// The count is cheap, and may be more than the CPU: a guest statement's CPU
// is watched (cputime: the thread's clock, and a timer) from its first
// progress call on, that is once it has run progressOps steps, and what
// runs before that (the compile, the first steps, and the whole of a
// statement that ends sooner) is charged its wall time, which CPU time
// cannot exceed. Reading a thread's CPU clock is a system call, which would
// cost more than a short statement itself. Wall time can be far more than
// CPU time, though: a step that waits on the disk, or a thread that waits
// for a core on a loaded machine (an 8 MiB zeroblob INSERT took 2.09 s of
// wall time and 0.61 s of CPU). So once the count reaches the budget it is
// checked against the thread's CPU clock: every guest statement of the
// event runs on this thread (the caller locks its goroutine to it for the
// event; a cgo call runs on the caller's thread), so what the thread has
// spent since the event began (or, for a caller without a cputime watch in
// its ctx, since the event's first guest statement) is also at least the
// event's SQL CPU, and the smaller is charged. Besides the SQL it holds
// only what the thread ran around statements (the guest itself, under its
// own, smaller budget, and the caller's other host work). A caller that did not lock its goroutine, found on
// another thread, is charged the count as it is: that thread's clock says
// nothing of the event's.
func (d *db) spent() bool {
	if d.cpuSpent {
		return true
	}
	if d.cpuUsed < d.opts.SQLCPUPerEvent {
		return false
	}
	if all, ok := d.thread.Since(); ok {
		d.cpuUsed = min(d.cpuUsed, all)
	}
	d.cpuSpent = d.cpuUsed >= d.opts.SQLCPUPerEvent
	return d.cpuSpent
}

// progress is the progress handler: it stops the running statement at its
// deadline or once a guest statement spends the event's SQL CPU. Its first
// call for a guest statement charges the wall time before it and starts
// the statement's CPU watch (see spent).
func (d *db) progress() bool {
	if !d.hostStmt {
		if d.watch == nil {
			now := time.Now()
			d.cpuUsed += now.Sub(d.started)
			d.started = now
			if d.spent() {
				d.cpuOver.Store(true)
				return true
			}
			gen := d.gen
			d.watch = cputime.Start(d.opts.SQLCPUPerEvent-d.cpuUsed, func() { d.cpuExceeded(gen) })
		}
		if d.cpuOver.Load() {
			return true
		}
	}
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// statementCPU ends the accounting of the guest statement that has just
// run: what its watch counted, or the wall time not yet charged if it had
// none.
func (d *db) statementCPU() time.Duration {
	if d.watch == nil {
		return time.Since(d.started)
	}
	used := d.watch.Stop()
	d.watch = nil
	return used
}

// cpuExceeded runs on the CPU watch's goroutine when guest statement gen
// has spent the event's SQL CPU: the progress handler and the Go SQL
// functions stop it at their next look, and the interrupt stops it where
// SQLite checks inside a step. A late call, for a statement that has
// finished, does nothing: that statement's CPU, counted when it ended, has
// spent the budget, so the event's next statement is refused.
func (d *db) cpuExceeded(gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return
	}
	d.cpuOver.Store(true)
	if d.running {
		d.c.interrupt()
	}
}

// beginGuest says that a guest statement is about to be prepared and run,
// under ctx; endGuest that it has ended. Between the two the watchdog may
// interrupt it (sqlite3_interrupt): the CPU watch's goroutine once it has
// spent the budget, and, for the deadline, one context.AfterFunc per event
// (per ctx, which is the event's) rather than one per statement. The mutex
// makes an interrupt land only while the statement runs: endGuest waits
// for one in progress, and one that lands as a statement ends is cleared by
// SQLite itself, which resets the flag when the next statement starts with
// none active (every statement is reset when it ends).
func (d *db) beginGuest(ctx context.Context) {
	done := ctx.Done()
	d.mu.Lock()
	d.running = true
	d.gen++
	renew := done != d.deadlineDone
	d.mu.Unlock()
	if renew {
		d.endDeadlineWatch()
		if done != nil {
			d.mu.Lock()
			d.deadlineDone = done
			d.mu.Unlock()
			d.stopDeadline = context.AfterFunc(ctx, func() { d.deadlinePassed(done) })
		}
	}
}

func (d *db) endGuest() {
	d.mu.Lock()
	d.running = false
	d.mu.Unlock()
}

// deadlinePassed runs on its own goroutine when the ctx whose Done is done
// ends.
func (d *db) deadlinePassed(done <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running && d.deadlineDone == done {
		d.c.interrupt()
	}
}

// endDeadlineWatch stops the deadline's AfterFunc, if any.
func (d *db) endDeadlineWatch() {
	if d.stopDeadline != nil {
		d.stopDeadline()
		d.stopDeadline = nil
	}
	d.mu.Lock()
	d.deadlineDone = nil
	d.mu.Unlock()
}

// Sync makes every commit so far durable (storage.Syncer): it fsyncs the
// log, as exec-durable does after its commit. With no log there is nothing
// to sync: a checkpoint, which syncs the database file, has folded it in.
func (d *db) Sync(context.Context) error {
	if d.closed {
		return errClosed
	}
	if err := d.syncLog(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// openLog opens the WAL for reading (d.wal) if it is not yet open. The
// descriptor is kept until Close (see Close). SQLite keeps the file once
// it exists (a TRUNCATE checkpoint empties it, Close removes it after its
// own close).
func (d *db) openLog() error {
	if d.wal != nil {
		return nil
	}
	f, err := os.Open(d.path + "-wal")
	if err != nil {
		return err
	}
	d.wal = f
	return nil
}

// syncLog makes what the connection has committed durable. With
// synchronous=NORMAL a WAL-mode commit is written to the log but not
// fsynced; fsyncing the log (and its directory, once, for the log's and
// the database's names) gives what synchronous=FULL would have for this
// commit. SQLite forbids changing synchronous inside a transaction, so
// switching it for a durable COMMIT is not an option; a checkpoint would
// rewrite the database file for nothing.
func (d *db) syncLog() error {
	if err := d.openLog(); err != nil {
		return err
	}
	if err := d.wal.Sync(); err != nil {
		return err
	}
	if !d.dirSynced {
		if err := syncDir(filepath.Dir(d.path)); err != nil {
			return err
		}
		d.dirSynced = true
	}
	return nil
}
