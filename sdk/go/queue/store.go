//go:build wasip1

package queue

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/internal/delay"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// Serve makes this module the queue class: it registers Init, Alarm and
// Handle, asking config for the settings at each event (they may depend on
// wasmkeep.Self().Name). Call it from an init function; a class with code
// of its own calls the three itself instead.
func Serve(config func() Config) {
	wasmkeep.OnInit(Init)
	wasmkeep.OnAlarm(func() error { return Alarm(config()) })
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) { Handle(config(), w, r) })
}

// The book's tables (ADR 0015), plus in_flight: 1 while a lease runs, which
// tells a message in flight from one retried with a delay.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS wasmkeep_queue (id INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL,
		enqueued_at INTEGER NOT NULL, visible_at INTEGER NOT NULL,
		attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, in_flight INTEGER NOT NULL DEFAULT 0)`,
	`CREATE INDEX IF NOT EXISTS wasmkeep_queue_visible ON wasmkeep_queue (visible_at, id)`,
	`CREATE INDEX IF NOT EXISTS wasmkeep_queue_attempts ON wasmkeep_queue (attempts, visible_at)`,
	`CREATE TABLE IF NOT EXISTS wasmkeep_queue_dead (id INTEGER PRIMARY KEY, body BLOB NOT NULL,
		enqueued_at INTEGER NOT NULL, attempts INTEGER NOT NULL, failed_at INTEGER NOT NULL, reason TEXT NOT NULL)`,
}

// Init creates the queue's tables; run it from the OnInit hook.
func Init() error {
	for _, s := range schema {
		if _, err := wasmkeep.Exec(s); err != nil {
			return err
		}
	}
	return nil
}

func now() int64 { return time.Now().UnixMilli() }

// Handle answers a request of the protocol (a path under PathPrefix) with
// the queue's settings c. Only callers with x-wasmkeep-caller (other actors)
// that c.Allow accepts, if set, are answered; anything else gets 403.
func Handle(c Config, w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	c = c.withDefaults()
	caller := r.Header.Get("X-Wasmkeep-Caller")
	if caller == "" {
		wasmkeep.Error(w, "queue: only other actors may call a queue (x-wasmkeep-caller is missing)", 403)
		return
	}
	if c.Allow != nil && !c.Allow(caller) {
		wasmkeep.Error(w, "queue: this queue does not answer "+caller, 403)
		return
	}
	op, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok || (op != "send" && op != "lease" && op != "settle" && op != "stats" && op != "dead") {
		wasmkeep.Error(w, "queue: no such operation: "+r.URL.Path, 404)
		return
	}
	if r.Method != "POST" {
		wasmkeep.Error(w, "queue: "+op+" takes POST", 405)
		return
	}
	in := abi.NewReader(r.Body)
	var out []byte
	var err error
	switch op {
	case "send":
		out, err = handleSend(c, in)
	case "lease":
		out, err = handleLease(c, in)
	case "settle":
		out, err = handleSettle(c, in)
	case "stats":
		out, err = handleStats(c, in)
	case "dead":
		out, err = handleDead(c, in)
	}
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		wasmkeep.Error(w, "queue: "+op+": "+err.Error(), 400)
	case err != nil:
		wasmkeep.Error(w, "queue: "+op+": "+err.Error(), 500)
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(out)
	}
}

// badRequest is a malformed request (400).
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func malformed(in *abi.Reader, what string) error {
	if err := in.Done(); err != nil {
		return badRequest{"malformed request: " + err.Error()}
	}
	return badRequest{what}
}

// send: u64 delay_ms, list of bodies (1 to MaxBatch) -> list of u64 ids.
func handleSend(c Config, in *abi.Reader) ([]byte, error) {
	wait := in.U64()
	n := in.Count(4)
	if in.Err() == nil && (n == 0 || n > MaxBatch) { // before allocating for a count a body claims
		return nil, badRequest{"a send carries 1 to " + strconv.Itoa(MaxBatch) + " messages, not " + strconv.Itoa(n)}
	}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = in.Bytes()
	}
	if err := in.Done(); err != nil {
		return nil, malformed(in, "")
	}
	if wait > delay.Max {
		return nil, badRequest{"delay out of range"}
	}
	// The alarm first: it is part of the event's writes, so the durable
	// insert makes it durable too, and a node lost after the answer cannot
	// leave a push queue holding a message with no alarm to deliver it. An
	// alarm for a send that then fails only finds nothing to do.
	schedule(c, now()+int64(wait))
	first, err := enqueue(bodies, int64(wait))
	if err != nil {
		return nil, err
	}
	out := abi.AppendU32(nil, uint32(len(bodies)))
	for i := range bodies {
		out = abi.AppendU64(out, uint64(first+int64(i)))
	}
	return out, nil
}

// enqueue inserts bodies with one durable multi-row INSERT (all or none)
// and returns the first id; the others follow it. The ids are chosen here,
// after the highest ever given (AUTOINCREMENT keeps it in sqlite_sequence),
// so that they are known without reading the rows back.
func enqueue(bodies [][]byte, delay int64) (int64, error) {
	var last int64
	err := wasmkeep.QueryRow(`SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'wasmkeep_queue'), 0),
		coalesce((SELECT max(id) FROM wasmkeep_queue), 0))`).Scan(&last)
	if err != nil {
		return 0, err
	}
	t := now()
	times := ", ?, " + strconv.FormatInt(t, 10) + ", " + strconv.FormatInt(t+delay, 10) + ")"
	var sql strings.Builder
	sql.WriteString("INSERT INTO wasmkeep_queue (id, body, enqueued_at, visible_at) VALUES ")
	args := make([]any, len(bodies))
	for i, b := range bodies {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString("(" + strconv.FormatInt(last+1+int64(i), 10) + times)
		if b == nil {
			b = []byte{} // a nil blob is NULL
		}
		args[i] = b
	}
	if _, err := wasmkeep.ExecDurable(sql.String(), args...); err != nil {
		return 0, err
	}
	return last + 1, nil
}

// lease: u32 max (0: the batch size), u64 visibility_ms (0: the queue's)
// -> list of messages.
func handleLease(c Config, in *abi.Reader) ([]byte, error) {
	n, vis := int(in.U32()), in.U64()
	if err := in.Done(); err != nil {
		return nil, malformed(in, "")
	}
	if n == 0 {
		n = c.BatchSize
	}
	if n > MaxBatch || vis > delay.Max {
		return nil, badRequest{"max or visibility out of range"}
	}
	if vis == 0 {
		vis = uint64(c.VisibilityMs)
	}
	ms, err := lease(c, now(), n, int64(vis))
	if err != nil {
		return nil, err
	}
	return appendMessages(nil, ms), nil
}

// lease takes up to n visible messages with attempts left, oldest visible
// first and 8 MiB of bodies at most, adds one to their attempts and hides
// them for vis ms. The last error says the lease
// ran out until an ack or retry replaces it.
func lease(c Config, t int64, n int, vis int64) ([]Message, error) {
	if err := sweep(c, t); err != nil {
		return nil, err
	}
	// Up to n, while their bodies stay under 8 MiB (the first always goes):
	// a query's result and a delivery's call are bounded at 16 MB.
	rows, err := wasmkeep.Query(`SELECT id, attempts, enqueued_at, body FROM wasmkeep_queue WHERE id IN
		(SELECT id FROM (SELECT id, sum(length(body)) OVER (ORDER BY visible_at, id) - length(body) AS before
			FROM wasmkeep_queue WHERE visible_at <= ? AND attempts < ? ORDER BY visible_at, id LIMIT ?)
		WHERE before < 8388608)
		ORDER BY visible_at, id`, t, c.MaxAttempts, n)
	if err != nil {
		return nil, err
	}
	ms := make([]Message, 0, rows.Len())
	var ids strings.Builder
	for rows.Next() {
		var m Message
		var id, attempts int64
		if err := rows.Scan(&id, &attempts, &m.EnqueuedAt, &m.Body); err != nil {
			return nil, err
		}
		m.ID, m.Attempt = uint64(id), uint32(attempts)+1
		if len(ms) > 0 {
			ids.WriteString(", ")
		}
		ids.WriteString(strconv.FormatUint(m.ID, 10))
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	_, err = wasmkeep.Exec(`UPDATE wasmkeep_queue SET attempts = attempts + 1, visible_at = ?, in_flight = 1,
		last_error = 'attempt ' || (attempts + 1) || ': the lease ran out (' || ? || ' ms) without an ack or a retry'
		WHERE id IN (`+ids.String()+`)`, t+vis, vis)
	if err != nil {
		return nil, err
	}
	return ms, nil
}

// sweep dead-letters the visible messages that used up their attempts,
// with their last error. OR REPLACE: a sweep cut short between the two
// statements is finished by the next, which copies the rows again. Most
// sweeps find nothing and cost one indexed statement.
func sweep(c Config, t int64) error {
	n, err := wasmkeep.Exec(`INSERT OR REPLACE INTO wasmkeep_queue_dead (id, body, enqueued_at, attempts, failed_at, reason)
		SELECT id, body, enqueued_at, attempts, ?, coalesce(last_error, 'no attempt left')
		FROM wasmkeep_queue WHERE id IN (`+sweepPage+`)`, t, c.MaxAttempts, t)
	if err != nil || n == 0 {
		return err
	}
	_, err = wasmkeep.Exec(`DELETE FROM wasmkeep_queue WHERE id IN (`+sweepPage+`)`, c.MaxAttempts, t)
	return err
}

// sweepPage picks the messages one sweep moves (its parameters: the
// attempts allowed, now): up to 100, oldest id first, while their bodies
// stay under 8 MiB (the first always goes), so that one statement never
// copies more than an event may write. What is left goes at the next
// sweep, and leases skip it meanwhile.
const sweepPage = `SELECT id FROM (SELECT id, sum(length(body)) OVER (ORDER BY id) - length(body) AS before
	FROM wasmkeep_queue WHERE attempts >= ? AND visible_at <= ? ORDER BY id LIMIT 100) WHERE before < 8388608`

// settle: list of settlements -> list of u8, 1 where the lease was current
// and the outcome applied, 0 where it was stale.
func handleSettle(c Config, in *abi.Reader) ([]byte, error) {
	items, err := readSettlements(in)
	if err != nil {
		return nil, badRequest{err.Error()}
	}
	if err := in.Done(); err != nil {
		return nil, malformed(in, "")
	}
	if len(items) > MaxBatch {
		return nil, badRequest{"at most " + strconv.Itoa(MaxBatch) + " settlements"}
	}
	current, err := settle(c, items, true)
	if err != nil {
		return nil, err
	}
	out := abi.AppendU32(nil, uint32(len(current)))
	for _, ok := range current {
		if ok {
			out = append(out, 1)
		} else {
			out = append(out, 0)
		}
	}
	return out, nil
}

// settle applies each outcome whose lease is current: the message's
// attempts are the lease's and it is in flight; with live, the lease must
// also not have run out (a pull consumer's ack after its lease ran out is
// stale, as the book says). A push delivery settles without live: nobody
// could lease the batch again while the queue waited for the consumer.
func settle(c Config, items []Settlement, live bool) ([]bool, error) {
	t := now()
	cond := "id = ? AND attempts = ? AND in_flight = 1"
	if live {
		cond += " AND visible_at > " + strconv.FormatInt(t, 10)
	}
	current := make([]bool, len(items))
	retried := false
	for i, s := range items {
		var n int64
		var err error
		if s.Outcome.kind == outcomeAck {
			n, err = wasmkeep.Exec("DELETE FROM wasmkeep_queue WHERE "+cond, s.ID, s.Attempt)
		} else {
			delay := s.Outcome.delayMs
			if s.Outcome.kind == outcomeRetry {
				delay = c.backoff(s.Attempt)
			}
			reason := "attempt " + strconv.FormatUint(uint64(s.Attempt), 10) + ": retried by the consumer"
			n, err = retry(c, t, cond, s.ID, s.Attempt, delay, reason)
			retried = retried || n > 0
		}
		if err != nil {
			return nil, err
		}
		current[i] = n > 0
	}
	if retried {
		schedule(c, t)
	}
	return current, nil
}

// retry makes the message named by cond (id, attempt) visible again after
// delay with reason as its last error; on its last attempt it is
// dead-lettered at once instead. It returns the number of rows changed.
func retry(c Config, t int64, cond string, id uint64, attempt uint32, delay int64, reason string) (int64, error) {
	if int(attempt) >= c.MaxAttempts {
		n, err := wasmkeep.Exec(`INSERT OR REPLACE INTO wasmkeep_queue_dead (id, body, enqueued_at, attempts, failed_at, reason)
			SELECT id, body, enqueued_at, attempts, ?, ? FROM wasmkeep_queue WHERE `+cond, t, reason, id, attempt)
		if err != nil || n == 0 {
			return n, err
		}
		return wasmkeep.Exec("DELETE FROM wasmkeep_queue WHERE id = ?", id)
	}
	return wasmkeep.Exec("UPDATE wasmkeep_queue SET visible_at = ?, in_flight = 0, last_error = ? WHERE "+cond,
		t+delay, reason, id, attempt)
}

// stats: empty -> u64 ready, delayed, in flight, dead.
func handleStats(c Config, in *abi.Reader) ([]byte, error) {
	if err := in.Done(); err != nil {
		return nil, malformed(in, "")
	}
	t := now()
	if err := sweep(c, t); err != nil {
		return nil, err
	}
	var s [4]int64
	err := wasmkeep.QueryRow(`SELECT
		(SELECT count(*) FROM wasmkeep_queue WHERE visible_at <= ? AND attempts < ?),
		(SELECT count(*) FROM wasmkeep_queue WHERE visible_at > ? AND in_flight = 0),
		(SELECT count(*) FROM wasmkeep_queue WHERE visible_at > ? AND in_flight = 1),
		(SELECT count(*) FROM wasmkeep_queue_dead) +
		(SELECT count(*) FROM wasmkeep_queue WHERE visible_at <= ? AND attempts >= ?)`,
		t, c.MaxAttempts, t, t, t, c.MaxAttempts).Scan(&s[0], &s[1], &s[2], &s[3])
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, v := range s {
		out = abi.AppendU64(out, uint64(v))
	}
	return out, nil
}

// dead: u32 limit (0: 100, at most MaxBatch) -> list of (u64 id, u32
// attempts, u64 enqueued_at, u64 failed_at, string reason, bytes body),
// oldest id first.
func handleDead(c Config, in *abi.Reader) ([]byte, error) {
	limit := int(in.U32())
	if err := in.Done(); err != nil {
		return nil, malformed(in, "")
	}
	if limit == 0 {
		limit = 100
	}
	if limit > MaxBatch {
		return nil, badRequest{"limit out of range"}
	}
	if err := sweep(c, now()); err != nil {
		return nil, err
	}
	rows, err := wasmkeep.Query(`SELECT id, attempts, enqueued_at, failed_at, reason, body
		FROM wasmkeep_queue_dead ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	out := abi.AppendU32(nil, uint32(rows.Len()))
	for rows.Next() {
		var d DeadLetter
		var id, attempts int64
		if err := rows.Scan(&id, &attempts, &d.EnqueuedAt, &d.FailedAt, &d.Reason, &d.Body); err != nil {
			return nil, err
		}
		d.ID, d.Attempts = uint64(id), uint32(attempts)
		out = appendDeadLetter(out, d)
	}
	return out, nil
}

// schedule sets the alarm of a push queue for a message visible at at,
// unless an earlier one is pending.
func schedule(c Config, at int64) {
	if c.consumer == "" {
		return
	}
	if pending, ok := wasmkeep.GetAlarm(); !ok || pending > at {
		wasmkeep.SetAlarm(at)
	}
}

// Alarm runs a push queue's alarm (a pull-only queue has none): it leases
// one batch, delivers it in one call to the consumer and applies the
// outcomes in the reply; a failed or refused call retries the whole batch
// with the backoff. Then it sets the alarm for the next visible message:
// at once if one is ready. Run it from the OnAlarm hook.
func Alarm(c Config) error {
	c = c.withDefaults()
	if c.consumer == "" {
		return nil
	}
	ms, err := lease(c, now(), c.BatchSize, c.VisibilityMs)
	if err != nil {
		return err
	}
	if len(ms) > 0 {
		if err := deliver(c, ms); err != nil {
			return err
		}
	}
	var next wasmkeep.Value
	if err := wasmkeep.QueryRow("SELECT min(visible_at) FROM wasmkeep_queue").Scan(&next); err != nil {
		return err
	}
	if next.IsNull() {
		wasmkeep.ClearAlarm()
		return nil
	}
	wasmkeep.SetAlarm(max(next.Int(), now()))
	return nil
}

// deliver sends ms to the consumer and settles them by its reply.
func deliver(c Config, ms []Message) error {
	self := wasmkeep.Self()
	req, err := wasmkeep.NewRequest("POST", deliverPath, appendMessages(abi.AppendString(nil, self.Class+"/"+self.Name), ms))
	if err != nil {
		return err
	}
	failure := ""
	var outcomes []Settlement
	resp, err := wasmkeep.Call(c.consumer, req)
	switch {
	case err != nil:
		failure = err.Error()
	case resp.StatusCode != 200:
		failure = "status " + strconv.Itoa(resp.StatusCode) + ": " + strings.TrimSpace(string(resp.Body[:min(len(resp.Body), 400)]))
	default:
		in := abi.NewReader(resp.Body)
		outcomes, err = readSettlements(in)
		if err == nil {
			err = in.Done()
		}
		if err != nil {
			failure = "malformed reply: " + err.Error()
		}
	}
	if failure != "" {
		t := now()
		cond := "id = ? AND attempts = ? AND in_flight = 1"
		for _, m := range ms {
			reason := "attempt " + strconv.FormatUint(uint64(m.Attempt), 10) + ": delivery to " + c.consumer + " failed: " + failure
			if _, err := retry(c, t, cond, m.ID, m.Attempt, c.backoff(m.Attempt), reason); err != nil {
				return err
			}
		}
		return nil
	}
	// Only outcomes for this batch's leases count.
	leased := make(map[uint64]uint32, len(ms))
	for _, m := range ms {
		leased[m.ID] = m.Attempt
	}
	mine := outcomes[:0]
	for _, s := range outcomes {
		if a, ok := leased[s.ID]; ok && a == s.Attempt {
			mine = append(mine, s)
		}
	}
	_, err = settle(c, mine, false)
	return err
}
