//go:build wasip1

package kv

import (
	"strconv"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// Serve makes this module the ready-made shard class: it registers Init,
// Alarm and Handle. Call it from an init function, and leave main empty:
//
//	func init() { kv.Serve() }
//
//	func main() {}
func Serve() {
	wasmkeep.OnInit(Init)
	wasmkeep.OnAlarm(Alarm)
	wasmkeep.HandleFunc(Handle)
}

// The shard's tables (ADR 0015). Versions come from wasmkeep_kv_meta.seq,
// which only grows: a trigger keeps it at the last version written, so a
// put is one statement (durable on its own) and a delete never gives a
// version back.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS wasmkeep_kv (key BLOB PRIMARY KEY, value BLOB NOT NULL,
		version INTEGER NOT NULL, expires_at INTEGER) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS wasmkeep_kv_meta (id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL)`,
	`INSERT OR IGNORE INTO wasmkeep_kv_meta (id, seq) VALUES (0, 0)`,
	`CREATE INDEX IF NOT EXISTS wasmkeep_kv_expiry ON wasmkeep_kv (expires_at) WHERE expires_at IS NOT NULL`,
	`CREATE TRIGGER IF NOT EXISTS wasmkeep_kv_seq AFTER INSERT ON wasmkeep_kv BEGIN
		UPDATE wasmkeep_kv_meta SET seq = max(seq, NEW.version) WHERE id = 0; END`,
	`CREATE TRIGGER IF NOT EXISTS wasmkeep_kv_seq_update AFTER UPDATE OF version ON wasmkeep_kv BEGIN
		UPDATE wasmkeep_kv_meta SET seq = max(seq, NEW.version) WHERE id = 0; END`,
}

// Init creates the shard's tables; a shard with code of its own calls it
// from its OnInit hook.
func Init() error {
	for _, s := range schema {
		if _, err := wasmkeep.Exec(s); err != nil {
			return err
		}
	}
	return nil
}

// ExpiryBatch is how many expired keys one alarm deletes.
const ExpiryBatch = 500

// Alarm deletes expired keys, ExpiryBatch at a time, then sets the alarm
// for the next expiry (at once if a full batch went). A shard with code of
// its own calls it from its OnAlarm hook.
func Alarm() error {
	now := nowMs()
	n, err := wasmkeep.Exec(`DELETE FROM wasmkeep_kv WHERE key IN
		(SELECT key FROM wasmkeep_kv WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`, now, ExpiryBatch)
	if err != nil {
		return err
	}
	if n >= ExpiryBatch {
		wasmkeep.SetAlarm(now) // the next batch, as an event of its own
		return nil
	}
	var next wasmkeep.Value
	if err := wasmkeep.QueryRow("SELECT min(expires_at) FROM wasmkeep_kv WHERE expires_at IS NOT NULL").Scan(&next); err != nil {
		return err
	}
	if !next.IsNull() {
		wasmkeep.SetAlarm(next.Int())
	}
	return nil
}

// Handle answers the key-value protocol's requests (paths under
// /wasmkeep-kv/v1/), from other actors only: a request without the
// X-Wasmkeep-Caller header, which the host sets on calls and strips from
// outside requests, gets 403. A shard with code of its own sends those
// paths here (IsRequest tells them apart).
func Handle(w wasmkeep.ResponseWriter, r *wasmkeep.Request) { handle(w, r, nil) }

// HandleAllowing returns Handle for the callers allow accepts, given the
// X-Wasmkeep-Caller header ("tenant/class/name", the name percent-encoded);
// other callers get 403 too.
func HandleAllowing(allow func(caller string) bool) func(wasmkeep.ResponseWriter, *wasmkeep.Request) {
	return func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) { handle(w, r, allow) }
}

func handle(w wasmkeep.ResponseWriter, r *wasmkeep.Request, allow func(string) bool) {
	caller := r.Header.Get("X-Wasmkeep-Caller")
	if caller == "" {
		wasmkeep.Error(w, "forbidden: a key-value shard answers only calls from other actors", 403)
		return
	}
	if allow != nil && !allow(caller) {
		wasmkeep.Error(w, "forbidden: this shard does not answer "+caller, 403)
		return
	}
	if r.Method != "POST" {
		w.Header().Set("Allow", "POST")
		wasmkeep.Error(w, "method not allowed", 405)
		return
	}
	var reply []byte
	var err error
	switch r.URL.Path {
	case pathGet:
		reply, err = get(r.Body)
	case pathPut:
		reply, err = put(r.Body)
	case pathDelete:
		reply, err = del(r.Body)
	case pathList:
		reply, err = list(r.Body)
	default:
		wasmkeep.Error(w, "not found: no key-value operation "+r.URL.Path, 404)
		return
	}
	if err != nil {
		code := 500
		if e, ok := err.(*status); ok {
			code = e.code
		}
		wasmkeep.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(reply)
}

// status is an error answered with its own status code.
type status struct {
	code int
	msg  string
}

func (s *status) Error() string { return s.msg }

func badRequest(what string, err error) error {
	return &status{400, "malformed " + what + " request: " + err.Error()}
}

// blob keeps an empty key a BLOB: a nil []byte binds as NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

const live = "(expires_at IS NULL OR expires_at > ?)"

func get(body []byte) ([]byte, error) {
	q, err := decodeGet(body)
	if err != nil {
		return nil, badRequest("get", err)
	}
	rows, err := wasmkeep.Query("SELECT value, version, expires_at FROM wasmkeep_kv WHERE key = ? AND "+live, blob(q.key), nowMs())
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return encodeEntry(nil), nil
	}
	var e Entry
	var version int64
	var expires wasmkeep.Value
	if err := rows.Scan(&e.Value, &version, &expires); err != nil {
		return nil, err
	}
	e.Version, e.ExpiresAt = uint64(version), expires.Int()
	return encodeEntry(&e), nil
}

// state is what a write finds of its key: its live version (present), or
// an expired row (row but not present), or nothing; and the shard's last
// version.
type state struct {
	version uint64
	present bool
	row     bool
	seq     uint64
}

// current reads key's state.
func current(key []byte, now int64) (state, error) {
	var last int64
	var v, exp wasmkeep.Value
	err := wasmkeep.QueryRow(`SELECT (SELECT seq FROM wasmkeep_kv_meta WHERE id = 0), version, expires_at
		FROM (SELECT 1) LEFT JOIN wasmkeep_kv ON key = ?`, blob(key)).Scan(&last, &v, &exp)
	s := state{seq: uint64(last)}
	if err != nil || v.IsNull() {
		return s, err
	}
	s.row = true
	if s.present = exp.IsNull() || exp.Int() > now; s.present {
		s.version = uint64(v.Int())
	}
	return s, nil
}

// expected checks a write's key and reads its state, then checks the
// write's expectation against it: a 400, a 500 or a 409 otherwise.
func expected(key []byte, e Expect, now int64) (state, error) {
	if len(key) > MaxKeyLen {
		return state{}, &status{400, "the key is " + strconv.Itoa(len(key)) + " bytes, over " + strconv.Itoa(MaxKeyLen)}
	}
	s, err := current(key, now)
	if err != nil {
		return s, err
	}
	if !e.holds(s.present, s.version) {
		return s, conflict(e, s.present, s.version)
	}
	return s, nil
}

func conflict(e Expect, present bool, version uint64) error {
	is := "the key is absent"
	if present {
		is = "the key is at version " + strconv.FormatUint(version, 10)
	}
	return &status{409, "conflict: expected " + e.String() + ", " + is}
}

func put(body []byte) ([]byte, error) {
	q, err := decodePut(body)
	if err != nil {
		return nil, badRequest("put", err)
	}
	now := nowMs()
	cur, err := expected(q.key, q.expect, now)
	if err != nil {
		return nil, err
	}
	var expires any // NULL: never
	if q.ttlMs > 0 {
		at := now + int64(min(q.ttlMs, 1<<52))
		expires = at
		// Set before the write, so that a durable write makes the alarm
		// durable too; an alarm with nothing to do sets the next one.
		if due, ok := wasmkeep.GetAlarm(); !ok || at < due {
			wasmkeep.SetAlarm(at)
		}
	}
	exec := wasmkeep.ExecDurable
	if q.flags&flagLocal != 0 {
		exec = wasmkeep.Exec
	}
	next := cur.seq + 1
	if _, err := exec(`INSERT INTO wasmkeep_kv (key, value, version, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version, expires_at = excluded.expires_at`,
		blob(q.key), blob(q.value), next, expires); err != nil {
		return nil, err
	}
	return encodeVersion(next), nil
}

func del(body []byte) ([]byte, error) {
	q, err := decodeDelete(body)
	if err != nil {
		return nil, badRequest("delete", err)
	}
	cur, err := expected(q.key, q.expect, nowMs())
	if err != nil {
		return nil, err
	}
	if cur.row {
		if _, err := wasmkeep.ExecDurable("DELETE FROM wasmkeep_kv WHERE key = ?", blob(q.key)); err != nil {
			return nil, err
		}
	}
	return encodeBool(cur.present), nil
}

func list(body []byte) ([]byte, error) {
	q, err := decodeList(body)
	if err != nil {
		return nil, badRequest("list", err)
	}
	limit := int64(min(q.limit, MaxListLimit))
	sql := "SELECT key FROM wasmkeep_kv WHERE key >= ? AND " + live
	args := []any{blob(q.prefix), nowMs()}
	if end, ok := prefixEnd(q.prefix); ok {
		sql += " AND key < ?"
		args = append(args, end)
	}
	if q.hasAfter {
		sql += " AND key > ?"
		args = append(args, blob(q.after))
	}
	rows, err := wasmkeep.Query(sql+" ORDER BY key LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, 0, rows.Len())
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return encodeKeys(keys), nil
}
