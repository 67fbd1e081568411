package workflow

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// backend is what the runner asks of the host: wasmkeep's storage, alarm
// and delete-self (host_wasip1.go). A storage error panics with dbError,
// which fails the event: a database error inside the runner is retried from
// the alarm, never turned into a failed workflow.
type backend interface {
	exec(durable bool, sql string, args ...any)
	query(sql string, args ...any) *wasmkeep.Rows
	setAlarm(at int64)
	deleteSelf()
}

// host is the backend: set for GOOS=wasip1; nil elsewhere, where only the
// client and the encoding are usable.
var host backend

// dbError is the panic of a failed storage call.
type dbError struct{ err error }

var now = func() int64 { return time.Now().UnixMilli() }

// The tables of ADR 0019, plus cut_runs: how many runs in a row ended
// without the workflow returning or parking.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS wasmkeep_wf (id INTEGER PRIMARY KEY CHECK (id = 1), status TEXT NOT NULL,
		run_id TEXT NOT NULL, input BLOB NOT NULL, output BLOB, error TEXT,
		cancel_requested INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
		cut_runs INTEGER NOT NULL DEFAULT 0)`,
	`CREATE TABLE IF NOT EXISTS wasmkeep_wf_step (pos INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL,
		result BLOB, error TEXT, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, wake_at INTEGER)`,
	`CREATE TABLE IF NOT EXISTS wasmkeep_wf_event (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
		payload BLOB NOT NULL, received_at INTEGER NOT NULL, consumed_at_pos INTEGER)`,
}

// Serve makes this module a workflow class running fn: it registers Init,
// HandleRequest and Alarm as the actor's hooks. Call it from an init
// function.
func Serve(fn Func, cfg Config) {
	wasmkeep.OnInit(Init)
	wasmkeep.OnAlarm(func() error { return Alarm(fn, cfg) })
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) { HandleRequest(cfg, w, r) })
}

// Init creates the runner's tables, for a class with hooks of its own: call
// it from its OnInit.
func Init() (err error) {
	defer recoverDB(&err)
	for _, s := range schema {
		host.exec(false, s)
	}
	return nil
}

func recoverDB(err *error) {
	if p := recover(); p != nil {
		d, ok := p.(dbError)
		if !ok {
			panic(p)
		}
		*err = d.err
	}
}

// instance is the wasmkeep_wf row.
type instance struct {
	status     string
	runID      string
	input      []byte
	output     []byte // nil: none
	err        string
	updatedAt  int64
	cutRuns    int
	hasOutput  bool
	positions  int
	lastRecord *record
}

const (
	stRunning   = "running"
	stWaiting   = "waiting"
	stCompleted = "completed"
	stFailed    = "failed"
	stCancelled = "cancelled"
)

func finished(status string) bool {
	return status == stCompleted || status == stFailed || status == stCancelled
}

// load reads the instance, or returns nil if there is none.
func load() *instance {
	rows := host.query("SELECT status, run_id, input, output, error, updated_at, cut_runs FROM wasmkeep_wf WHERE id = 1")
	if rows.Len() == 0 {
		return nil
	}
	v := rows.Row(0)
	in := &instance{status: v[0].Text(), runID: v[1].Text(), input: v[2].Blob(), err: v[4].Text(), updatedAt: v[5].Int(), cutRuns: int(v[6].Int())}
	if in.input == nil {
		in.input = []byte{}
	}
	if !v[3].IsNull() {
		in.output, in.hasOutput = append([]byte{}, v[3].Blob()...), true
	}
	return in
}

// loadSteps reads every recorded position. Each value a query returns has a
// cost (bench/README.md, "Workflow replay"), so a done position is two
// values, its key and its result, and only the positions without a result
// (a step being retried, a sleep or a wait not passed) read the rest.
func loadSteps() []record {
	rows := host.query("SELECT kind || ' ' || name, result FROM wasmkeep_wf_step ORDER BY pos")
	recs := make([]record, rows.Len())
	for i := range recs {
		v := rows.Row(i)
		recs[i].key = v[0].Blob()
		if !v[1].IsNull() {
			if recs[i].result = v[1].Blob(); recs[i].result == nil {
				recs[i].result = []byte{}
			}
		}
	}
	open := host.query("SELECT pos, error, attempts, next_attempt_at, wake_at FROM wasmkeep_wf_step WHERE result IS NULL")
	for i := range open.Len() {
		v := open.Row(i)
		pos := v[0].Int()
		if pos < 0 || pos >= int64(len(recs)) {
			panic(dbError{errors.New("workflow: the recorded positions are not 0 to " + strconv.Itoa(len(recs)-1) + ": " + strconv.FormatInt(pos, 10))})
		}
		r := &recs[pos]
		r.err, r.hasErr = v[1].Text(), !v[1].IsNull()
		r.attempts, r.nextAttemptAt, r.wakeAt = int(v[2].Int()), v[3].Int(), v[4].Int()
	}
	return recs
}

// status reports the instance: a waiting one's wake time and events come
// from its last position.
func (in *instance) report() *Status {
	s := &Status{Error: in.err}
	switch in.status {
	case stRunning:
		s.State = Running
	case stWaiting:
		s.State = Waiting
	case stCompleted:
		s.State = Completed
	case stFailed:
		s.State = Failed
	case stCancelled:
		s.State = Cancelled
	}
	if in.hasOutput {
		s.Output = in.output
	}
	rows := host.query(`SELECT (SELECT COUNT(*) FROM wasmkeep_wf_step), name, kind, result, next_attempt_at, wake_at, error
		FROM wasmkeep_wf_step ORDER BY pos DESC LIMIT 1`)
	if rows.Len() == 0 {
		return s
	}
	v := rows.Row(0)
	s.Positions = int(v[0].Int())
	if s.State != Waiting {
		return s
	}
	if !v[3].IsNull() { // done: the instance waits on nothing recorded yet
		return s
	}
	switch v[2].Text() {
	case kindSleep:
		s.WakeAt = v[5].Int()
	case kindWait:
		if v[6].IsNull() {
			s.WakeAt, s.WaitingFor = v[5].Int(), []string{v[1].Text()}
		}
	case kindStep:
		s.WakeAt = v[4].Int()
	}
	return s
}

// HandleRequest answers the client's calls (the wasmkeep-workflow/v1
// routes), for a class with a handler of its own. It only reads and
// records: the workflow runs on the alarm.
func HandleRequest(cfg Config, w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	cfg = cfg.withDefaults()
	var err error
	defer func() {
		recoverDB(&err)
		if err != nil {
			wasmkeep.Error(w, "workflow: storage: "+err.Error(), 500)
		}
	}()
	if r.Header.Get("X-Wasmkeep-Caller") == "" {
		if load() == nil {
			host.deleteSelf() // an outside request leaves nothing either
		}
		wasmkeep.Error(w, "workflow instances answer only other actors (actors.call)", 403)
		return
	}
	op, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok || r.Method != "POST" || (op != "start" && op != "status" && op != "event" && op != "cancel") {
		unknown(w, load() == nil, "no such route: "+r.Method+" "+r.URL.Path)
		return
	}
	in := load()
	if in == nil && op != "start" {
		unknown(w, true, "unknown workflow instance")
		return
	}
	switch op {
	case "start":
		rd := abi.NewReader(r.Body)
		input := rd.Bytes()
		if err := rd.Done(); err != nil {
			unknownOr400(w, in == nil, "malformed start: input: "+err.Error())
			return
		}
		if in == nil {
			t := now()
			host.setAlarm(t) // before the durable write, which makes it durable too
			host.exec(true, "INSERT INTO wasmkeep_wf (id, status, run_id, input, created_at, updated_at) VALUES (1, ?, ?, ?, ?, ?)",
				stRunning, newRunID(), append([]byte{}, input...), t, t)
			in = load()
		}
	case "event":
		rd := abi.NewReader(r.Body)
		name, payload := rd.String(), rd.Bytes()
		if err := rd.Done(); err != nil {
			wasmkeep.Error(w, "malformed event: "+err.Error(), 400)
			return
		}
		if finished(in.status) {
			wasmkeep.Error(w, "the workflow is "+in.status+": it takes no more events", 409)
			return
		}
		t := now()
		host.setAlarm(t)
		host.exec(true, "INSERT INTO wasmkeep_wf_event (name, payload, received_at) VALUES (?, ?, ?)", name, append([]byte{}, payload...), t)
		w.WriteHeader(200)
		return
	case "cancel":
		if !finished(in.status) {
			t := now()
			host.setAlarm(t + cfg.RetentionMs)
			host.exec(true, "UPDATE wasmkeep_wf SET status = ?, cancel_requested = 1, updated_at = ? WHERE id = 1", stCancelled, t)
			in = load()
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(appendStatus(nil, in.report()))
}

// unknown answers 404 and, when the actor holds no instance, deletes it in
// the same event: an unknown id leaves nothing behind.
func unknown(w wasmkeep.ResponseWriter, empty bool, msg string) {
	if empty {
		host.deleteSelf()
	}
	wasmkeep.Error(w, msg, 404)
}

func unknownOr400(w wasmkeep.ResponseWriter, empty bool, msg string) {
	if empty {
		host.deleteSelf()
	}
	wasmkeep.Error(w, msg, 400)
}

// newRunID reads crypto/rand, which asks the host each time: math/rand's
// state would be the same in every instance of a pre-initialised module.
func newRunID() string {
	var b [16]byte
	rand.Read(b[:])
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:8]), 36) + strconv.FormatUint(binary.LittleEndian.Uint64(b[8:]), 36)
}

// Alarm runs the instance as far as it can, for a class with an OnAlarm
// hook of its own. It returns an error only for a storage failure, which
// the watchdog alarm retries.
func Alarm(fn Func, cfg Config) (err error) {
	defer recoverDB(&err)
	cfg = cfg.withDefaults()
	start := now()
	in := load()
	if in == nil { // a stray alarm: nothing to keep
		host.deleteSelf()
		return nil
	}
	if finished(in.status) {
		if end := in.updatedAt + cfg.RetentionMs; start < end {
			host.setAlarm(end)
		} else {
			host.deleteSelf()
		}
		return nil
	}
	wf := &Run{cfg: cfg, runID: in.runID, deadline: start + cfg.RunBudgetMs}
	// Runs that keep ending without the workflow returning or parking (a
	// trap outside any step, a replay over its budget) back off, and fail
	// the instance after twice its attempts.
	if in.cutRuns >= 2*cfg.MaxAttempts {
		finish(wf, cfg, stFailed, nil, "the workflow's runs ended "+strconv.Itoa(in.cutRuns)+" times in a row without it returning or waiting")
		return nil
	}
	host.setAlarm(start + delay.Backoff(cfg.BackoffMs, cfg.MaxBackoffMs, in.cutRuns+1)) // the watchdog, before anything runs
	host.exec(false, "UPDATE wasmkeep_wf SET cut_runs = cut_runs + 1 WHERE id = 1")
	wf.steps = loadSteps()
	out, ferr := fn(wf, in.input)
	if wf.stopped != nil {
		ferr = wf.stopped
	}
	var s *Stop
	switch {
	case ferr == nil:
		if out == nil {
			out = []byte{}
		}
		finish(wf, cfg, stCompleted, out, "")
	case IsStop(ferr) && !asStop(ferr).fail:
		s = asStop(ferr)
		status := stWaiting
		if s.wakeAt == 0 {
			status = stRunning
		}
		host.setAlarm(max(s.wakeAt, now()))
		host.exec(true, "UPDATE wasmkeep_wf SET status = ?, cut_runs = 0, updated_at = ? WHERE id = 1", status, now())
	default:
		finish(wf, cfg, stFailed, nil, ferr.Error())
	}
	return nil
}

// finish records the instance's end and sets its retention alarm.
func finish(wf *Run, cfg Config, status string, out []byte, msg string) {
	t := now()
	host.setAlarm(t + cfg.RetentionMs)
	var errArg any
	if status == stFailed {
		errArg = msg
	}
	host.exec(true, "UPDATE wasmkeep_wf SET status = ?, output = ?, error = ?, cut_runs = 0, updated_at = ? WHERE id = 1", status, out, errArg, t)
}
