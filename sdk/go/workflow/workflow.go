// Package workflow runs durable workflows on ordinary actors, as the book's
// ADR 0019 designs them: one actor per instance, its steps recorded in the
// actor's database, its runs on the actor's alarm.
//
// A workflow is a function, run from the top on every event that moves the
// instance forward; Step, Sleep and WaitForEvent record what happened, and a
// recorded position returns its recorded result without running again:
//
//	func order(wf *workflow.Run, input []byte) ([]byte, error) {
//		res, err := wf.StepKeyed("reserve", func(key string) ([]byte, error) { return reserve(input, key) })
//		if err != nil {
//			return nil, err
//		}
//		if err := wf.Sleep("cool-off", 60_000); err != nil {
//			return nil, err
//		}
//		_, ok, err := wf.WaitForEvent("approved", 86_400_000)
//		if err != nil {
//			return nil, err
//		}
//		if !ok {
//			return nil, workflow.Fail("not approved in time")
//		}
//		return res, nil
//	}
//
//	func init() { workflow.Serve(order, workflow.Config{}) }
//
//	func main() {}
//
// The errors Run's methods return are the runner's own (the instance waits,
// or must fail): return them, as Rust's ? does. Two rules: between steps the
// function makes the same decisions every time (anything that varies goes
// inside a step), and a step may run more than once (its result is recorded
// after it returns), so steps are idempotent or use StepKeyed's key.
//
// Client starts and follows instances from any other actor.
package workflow

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
)

// Func is a workflow: it returns the output, or an error to fail the
// instance with (Fail, or any error; a Stop from Run's methods passes
// through).
type Func func(wf *Run, input []byte) ([]byte, error)

// Config sets the runner's limits; a zero field takes its default.
type Config struct {
	MaxAttempts  int   // [5] attempts of a step, unless its StepOptions say otherwise
	BackoffMs    int64 // [1000] the wait after a step's first failed attempt, doubling after each
	MaxBackoffMs int64 // [300000] the longest wait between attempts
	RetentionMs  int64 // [7 days] how long a finished instance is kept before it deletes itself
	RunBudgetMs  int64 // [20000] the wall-clock time an event spends on new steps before continuing in a new one
}

func (c Config) withDefaults() Config {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	def(&c.BackoffMs, 1000)
	def(&c.MaxBackoffMs, 300_000)
	def(&c.RetentionMs, 7*86_400_000)
	def(&c.RunBudgetMs, 20_000)
	c.BackoffMs, c.MaxBackoffMs = delay.Bound(c.BackoffMs), delay.Bound(c.MaxBackoffMs)
	c.RetentionMs, c.RunBudgetMs = delay.Bound(c.RetentionMs), delay.Bound(c.RunBudgetMs)
	return c
}

// StepOptions overrides Config's retries for one step; zero fields take
// Config's.
type StepOptions struct {
	MaxAttempts  int
	BackoffMs    int64
	MaxBackoffMs int64
}

// Stop is the runner's own error: the instance waits (until a time, for an
// event, or for a new event to continue in), or fails. Return it from the
// workflow function; once a Run has stopped, its methods return the same
// Stop again.
type Stop struct {
	fail   bool
	msg    string // the failure's message
	wakeAt int64  // waiting: when to run again (0: at once, in a new event)
	event  string // waiting: the event waited for, if any
}

func (s *Stop) Error() string {
	if s.fail {
		return s.msg
	}
	return "workflow: waiting (return this error: the runner continues the workflow later)"
}

// Fail returns the error that fails the workflow with msg.
func Fail(msg string) error { return &Stop{fail: true, msg: msg} }

// IsStop reports whether err is (or wraps) the runner's Stop: a function
// that handles errors itself lets these through.
func IsStop(err error) bool {
	var s *Stop
	return errors.As(err, &s)
}

// StepError is what TryStep returns once a step's attempts ran out: the
// workflow may handle it, or return it to fail.
type StepError struct {
	Step     string
	Attempts int
	Message  string // the last attempt's error
}

func (e *StepError) Error() string {
	return "step " + strconv.Quote(e.Step) + " failed after " + strconv.Itoa(e.Attempts) + " attempts: " + e.Message
}

// Run is one run of an instance, passed to the workflow function.
type Run struct {
	cfg      Config
	runID    string
	steps    []record // the recorded positions, by position
	pos      int      // the next position
	stopped  *Stop
	deadline int64 // after it, no new step starts in this event
	fresh    int   // new steps run in this event
}

// record is one recorded position, a row of wasmkeep_wf_step. Its key is
// the row's kind, a space and its name, and its result is non-nil once the
// position is done: a step's result, a wait's event payload, an empty one
// for a sleep that has passed. Both alias the query's memory.
type record struct {
	key           []byte
	result        []byte
	err           string
	hasErr        bool
	attempts      int
	nextAttemptAt int64 // 0: none
	wakeAt        int64 // 0: none
}

// is reports whether the record is the kind and name given, without
// allocating.
func (r *record) is(kind, name string) bool {
	k := r.key
	return len(k) == len(kind)+1+len(name) && string(k[:len(kind)]) == kind && k[len(kind)] == ' ' && string(k[len(kind)+1:]) == name
}

func newRecord(kind, name string) record { return record{key: []byte(kind + " " + name)} }

const (
	kindStep  = "step"
	kindSleep = "sleep"
	kindWait  = "wait"

	errCut     = "the attempt ended before its result was recorded"
	errTimeout = "timeout"
)

// StepKey is the idempotency key of the position the next step takes:
// unique to that step and to this run of the instance (a start after the
// retention is a new run).
func (wf *Run) StepKey() string { return wf.runID + "-" + strconv.Itoa(wf.pos) }

// Step runs f once at its position and records its result; later runs get
// the recorded result without calling f. An error from f is retried with
// backoff (a panic too: it ends the event, and the attempt counts); when
// the attempts run out the workflow fails.
func (wf *Run) Step(name string, f func() ([]byte, error), opts ...StepOptions) ([]byte, error) {
	return wf.step(name, func(string) ([]byte, error) { return f() }, false, opts)
}

// StepKeyed is Step with the step's idempotency key (StepKey) passed to f,
// for the service it calls.
func (wf *Run) StepKeyed(name string, f func(key string) ([]byte, error), opts ...StepOptions) ([]byte, error) {
	return wf.step(name, f, false, opts)
}

// TryStep is StepKeyed that, once the attempts run out, returns a
// *StepError for the workflow to handle instead of failing it. Other errors
// are Stops: return them.
func (wf *Run) TryStep(name string, f func(key string) ([]byte, error), opts ...StepOptions) ([]byte, error) {
	return wf.step(name, f, true, opts)
}

// Sleep waits ms milliseconds from the first time it is reached.
func (wf *Run) Sleep(name string, ms int64) error {
	return wf.sleep(name, ms, false)
}

// SleepUntil waits until at, in milliseconds since the Unix epoch.
func (wf *Run) SleepUntil(name string, at int64) error {
	return wf.sleep(name, at, true)
}

// WaitForEvent waits for an event name sent with Client.SendEvent and
// returns its payload with ok true, or ok false once timeoutMs (from the
// first time it is reached) has passed. Each wait takes the oldest event of
// its name not taken yet.
func (wf *Run) WaitForEvent(name string, timeoutMs int64) (payload []byte, ok bool, err error) {
	return wf.waitForEvent(name, timeoutMs)
}

// at returns the record at the next position and moves past it, or nil
// for a new position; a recorded position of another name or kind stops
// the run as failed.
func (wf *Run) at(name, kind string) (*record, int, error) {
	if wf.stopped != nil {
		return nil, 0, wf.stopped
	}
	pos := wf.pos
	wf.pos++
	if pos >= len(wf.steps) {
		return nil, pos, nil
	}
	r := &wf.steps[pos]
	if !r.is(kind, name) {
		rk, rn, _ := strings.Cut(string(r.key), " ")
		return nil, pos, wf.stop(&Stop{fail: true, msg: "the code changed the order of its steps: position " + strconv.Itoa(pos) +
			" is the " + rk + " " + strconv.Quote(rn) + " in the record, the " + kind + " " + strconv.Quote(name) + " in the code"})
	}
	return r, pos, nil
}

func (wf *Run) stop(s *Stop) error {
	wf.stopped = s
	return s
}

func (wf *Run) step(name string, f func(string) ([]byte, error), try bool, opts []StepOptions) ([]byte, error) {
	r, pos, err := wf.at(name, kindStep)
	if err != nil {
		return nil, err
	}
	max, first, most := wf.cfg.MaxAttempts, wf.cfg.BackoffMs, wf.cfg.MaxBackoffMs
	for _, o := range opts {
		if o.MaxAttempts > 0 {
			max = o.MaxAttempts
		}
		if o.BackoffMs > 0 {
			first = o.BackoffMs
		}
		if o.MaxBackoffMs > 0 {
			most = o.MaxBackoffMs
		}
	}
	if r == nil {
		wf.steps = append(wf.steps, newRecord(kindStep, name))
		r = &wf.steps[pos]
	}
	switch {
	case r.result != nil:
		return r.result, nil
	case r.hasErr && r.nextAttemptAt == 0 && r.attempts > 0: // ran out of attempts
		return nil, wf.exhausted(name, r, try)
	case r.nextAttemptAt > now():
		return nil, wf.stop(&Stop{wakeAt: r.nextAttemptAt})
	case r.attempts >= max: // cut after its last attempt
		r.nextAttemptAt = 0
		host.exec(true, "UPDATE wasmkeep_wf_step SET next_attempt_at = NULL WHERE pos = ?", pos)
		return nil, wf.exhausted(name, r, try)
	}
	t := now()
	if wf.fresh > 0 && t >= wf.deadline {
		return nil, wf.stop(&Stop{}) // continue in a new event
	}
	wf.fresh++
	// Count the attempt before f runs (a plain write: a trap inside f
	// then counts), with the watchdog alarm at its backoff.
	r.attempts++
	wait := t + delay.Backoff(first, most, r.attempts)
	host.setAlarm(wait)
	host.exec(false, "INSERT INTO wasmkeep_wf_step (pos, name, kind, error, attempts, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?) "+
		"ON CONFLICT (pos) DO UPDATE SET error = excluded.error, attempts = excluded.attempts, next_attempt_at = excluded.next_attempt_at",
		pos, name, kindStep, errCut, r.attempts, wait)
	// A panic in f ends the event like a trap: the attempt counts, and the
	// watchdog alarm brings the next one.
	res, ferr := f(wf.runID + "-" + strconv.Itoa(pos))
	if ferr == nil {
		if res == nil {
			res = []byte{}
		}
		// A run that records a result makes progress: its count of runs cut
		// short starts again (a plain write, made durable by the next).
		host.exec(false, "UPDATE wasmkeep_wf SET cut_runs = 0 WHERE id = 1")
		host.exec(true, "UPDATE wasmkeep_wf_step SET result = ?, error = NULL, next_attempt_at = NULL WHERE pos = ?", res, pos)
		r.result = res
		return res, nil
	}
	if IsStop(ferr) { // a Stop from f is the runner's: keep it
		return nil, wf.stop(asStop(ferr))
	}
	r.err, r.hasErr = ferr.Error(), true
	if r.attempts >= max {
		host.exec(true, "UPDATE wasmkeep_wf_step SET error = ?, next_attempt_at = NULL WHERE pos = ?", r.err, pos)
		r.nextAttemptAt = 0
		return nil, wf.exhausted(name, r, try)
	}
	wait = now() + delay.Backoff(first, most, r.attempts)
	host.exec(true, "UPDATE wasmkeep_wf_step SET error = ?, next_attempt_at = ? WHERE pos = ?", r.err, wait, pos)
	r.nextAttemptAt = wait
	return nil, wf.stop(&Stop{wakeAt: wait})
}

func asStop(err error) *Stop {
	var s *Stop
	errors.As(err, &s)
	return s
}

// exhausted is a step's outcome once its attempts ran out.
func (wf *Run) exhausted(name string, r *record, try bool) error {
	e := &StepError{Step: name, Attempts: r.attempts, Message: r.err}
	if !r.hasErr {
		e.Message = errCut
	}
	if try {
		return e
	}
	return wf.stop(&Stop{fail: true, msg: e.Error()})
}

// record adds a new position that waits until at (a sleep's wake time, a
// wait's timeout), written durably so that a lost write cannot restart it
// from a later "now".
func (wf *Run) record(pos int, kind, name string, at int64) *record {
	host.exec(true, "INSERT INTO wasmkeep_wf_step (pos, name, kind, wake_at) VALUES (?, ?, ?, ?)", pos, name, kind, at)
	wf.steps = append(wf.steps, newRecord(kind, name))
	r := &wf.steps[pos]
	r.wakeAt = at
	return r
}

func (wf *Run) sleep(name string, v int64, until bool) error {
	r, pos, err := wf.at(name, kindSleep)
	if err != nil {
		return err
	}
	if r == nil {
		if !until {
			v = delay.After(now(), v)
		}
		r = wf.record(pos, kindSleep, name, v)
	}
	switch {
	case r.result != nil:
		return nil
	case r.wakeAt > now():
		return wf.stop(&Stop{wakeAt: r.wakeAt})
	}
	// Passed: later loads need not read its wake time (a plain write: if
	// it is lost, the time has passed all the same).
	host.exec(false, "UPDATE wasmkeep_wf_step SET result = ? WHERE pos = ?", []byte{}, pos)
	r.result = []byte{}
	return nil
}

func (wf *Run) waitForEvent(name string, timeoutMs int64) ([]byte, bool, error) {
	r, pos, err := wf.at(name, kindWait)
	if err != nil {
		return nil, false, err
	}
	if r == nil {
		r = wf.record(pos, kindWait, name, delay.After(now(), timeoutMs))
	}
	switch {
	case r.result != nil:
		return r.result, true, nil
	case r.hasErr: // timed out
		return nil, false, nil
	}
	// The event this position already took, if a run marked it and did not
	// record the payload, else the oldest not taken.
	rows := host.query(`SELECT seq, payload FROM wasmkeep_wf_event WHERE name = ? AND (consumed_at_pos IS NULL OR consumed_at_pos = ?)
		ORDER BY consumed_at_pos IS NULL, seq LIMIT 1`, name, pos)
	if rows.Len() == 1 {
		row := rows.Row(0)
		payload := row[1].Blob()
		if payload == nil {
			payload = []byte{}
		}
		// The event is taken, and its payload is the wait's result; the
		// durable write makes the plain one before it durable too.
		host.exec(false, "UPDATE wasmkeep_wf_event SET consumed_at_pos = ? WHERE seq = ?", pos, row[0].Int())
		host.exec(true, "UPDATE wasmkeep_wf_step SET result = ? WHERE pos = ?", payload, pos)
		r.result = payload
		return payload, true, nil
	}
	if now() >= r.wakeAt {
		// Recorded, so an event arriving later does not change this
		// history.
		host.exec(true, "UPDATE wasmkeep_wf_step SET error = ? WHERE pos = ?", errTimeout, pos)
		r.err, r.hasErr = errTimeout, true
		return nil, false, nil
	}
	return nil, false, wf.stop(&Stop{wakeAt: r.wakeAt, event: name})
}
