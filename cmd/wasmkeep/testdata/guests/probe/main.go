//go:build wasip1

// The probe is the test suite's actor: each path exercises one rule of the
// node (ordering, limits, rollback, the SQL sandbox, hooks).
package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// Set with -ldflags "-X main.version=... -X main.failFirstInit=yes" to build
// a different module, or one whose first on-init fails; deleteInInit=durable
// has on-init end with delete-self-durable and succeed.
var (
	version       = "v1"
	failFirstInit = ""
	sqlInInit     = ""
	deleteInInit  = ""
)

// hits lives in the instance: it restarts from zero when the instance does.
var hits int

func init() {
	if sqlInInit == "yes" {
		// Package initialisation runs in _initialize, and may use the host.
		if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS from_init (v)"); err != nil {
			panic(err)
		}
	}
	wasmkeep.OnInit(func() error {
		if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS init_runs (n INTEGER PRIMARY KEY, version TEXT)"); err != nil {
			return err
		}
		if _, err := wasmkeep.Exec("INSERT INTO init_runs (version) VALUES (?)", version); err != nil {
			return err
		}
		var n int64
		if err := wasmkeep.QueryRow("SELECT count(*) FROM init_runs").Scan(&n); err != nil {
			return err
		}
		if failFirstInit == "yes" && n == 1 {
			return fmt.Errorf("first on-init fails on purpose")
		}
		if deleteInInit == "durable" {
			return wasmkeep.DeleteSelfDurable()
		}
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS seen (seq INTEGER)")
		return err
	})
	wasmkeep.OnAlarm(func() error {
		// Counts each attempt (committed on its own), then fails while the
		// table fail_alarm has a row.
		must2(wasmkeep.Exec("CREATE TABLE IF NOT EXISTS alarm_attempts (at INTEGER)"))
		must2(wasmkeep.Exec("INSERT INTO alarm_attempts VALUES (?)", time.Now().UnixMilli()))
		// While the table alarm_again counts down, the alarm is set again to
		// the very millisecond that fired.
		var again int64
		if wasmkeep.QueryRow("SELECT n FROM alarm_again").Scan(&again) == nil && again > 0 {
			must2(wasmkeep.Exec("UPDATE alarm_again SET n = n - 1"))
			at, _ := wasmkeep.GetAlarm()
			wasmkeep.SetAlarm(at)
		}
		// While the table alarm_then has a row, the alarm is set to the time
		// that fired plus its in_ms, or cleared if in_ms is NULL.
		var then any
		if wasmkeep.QueryRow("SELECT in_ms FROM alarm_then").Scan(&then) == nil {
			if in, ok := then.(int64); ok {
				at, _ := wasmkeep.GetAlarm()
				wasmkeep.SetAlarm(at + in)
			} else {
				wasmkeep.ClearAlarm()
			}
		}
		// While the table delete_on_alarm exists, on-alarm deletes the actor.
		var deleting int64
		wasmkeep.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'delete_on_alarm'").Scan(&deleting)
		if deleting > 0 {
			return wasmkeep.DeleteSelf()
		}
		var failing int64
		wasmkeep.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'fail_alarm'").Scan(&failing)
		if failing > 0 {
			return fmt.Errorf("on-alarm fails on purpose")
		}
		return nil
	})
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	hits++
	q := r.URL.Query()
	switch r.URL.Path {
	case "/hits":
		fmt.Fprintf(w, "%d", hits)
	case "/init-runs":
		var n int64
		must(wasmkeep.QueryRow("SELECT count(*) FROM init_runs").Scan(&n))
		fmt.Fprintf(w, "%d", n)
	case "/exec":
		n, err := wasmkeep.Exec(string(r.Body))
		answer(w, strconv.FormatInt(n, 10), err)
	case "/exec-durable":
		n, err := wasmkeep.ExecDurable(string(r.Body))
		answer(w, strconv.FormatInt(n, 10), err)
	case "/token":
		// Inserts ?t= with exec-durable and answers the number of tokens:
		// the kill test's unique writes (no UNIQUE: one applied twice shows).
		must2(wasmkeep.Exec("CREATE TABLE IF NOT EXISTS tokens (t TEXT)"))
		must2(wasmkeep.ExecDurable("INSERT INTO tokens (t) VALUES (?)", q.Get("t")))
		var n int64
		must(wasmkeep.QueryRow("SELECT count(*) FROM tokens").Scan(&n))
		fmt.Fprintf(w, "%d", n)
	case "/tokens":
		// Every token /token inserted, one a line, in insertion order.
		must2(wasmkeep.Exec("CREATE TABLE IF NOT EXISTS tokens (t TEXT)"))
		rows, err := wasmkeep.Query("SELECT t FROM tokens ORDER BY rowid")
		must(err)
		for rows.Next() {
			var t string
			must(rows.Scan(&t))
			fmt.Fprintln(w, t)
		}
	case "/query":
		rows, err := wasmkeep.Query(string(r.Body))
		if err != nil {
			answer(w, "", err)
			return
		}
		var out []string
		for rows.Next() {
			var s string
			must(rows.Scan(&s))
			out = append(out, s)
		}
		answer(w, strings.Join(out, ","), nil)
	case "/seen":
		// Records the request's seq after sleeping ms: ordering tests read
		// the table back with /query.
		ms, _ := strconv.Atoi(q.Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		_, err := wasmkeep.Exec("INSERT INTO seen (seq) VALUES (?)", q.Get("seq"))
		answer(w, q.Get("seq"), err)
	case "/sleep":
		// Sleeps ms and writes nothing: an event that keeps the actor busy
		// with nothing to ship after it.
		ms, _ := strconv.Atoi(q.Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		fmt.Fprint(w, "slept")
	case "/sleep-exit":
		// Sleeps ms, then exits: the event fails and its instance is gone,
		// so the actor's next event needs a new one.
		ms, _ := strconv.Atoi(q.Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		os.Exit(3)
	case "/value":
		// Binds the body as text or blob and reads it back through SQLite:
		// the bytes must come back exactly (NULs, invalid UTF-8, 16 MB).
		var arg any = r.Body
		if q.Get("type") == "text" {
			arg = string(r.Body)
		}
		var v wasmkeep.Value
		must(wasmkeep.QueryRow("SELECT ?", arg).Scan(&v))
		w.Header().Set("X-Kind", strconv.Itoa(int(v.Kind())))
		w.Write(v.Blob())
	case "/call":
		// Calls ?to=class/name at ?path= with ?bytes= of body, and answers
		// "<status> <body>" or "call-error <kind>: <message>".
		size, _ := strconv.Atoi(q.Get("bytes"))
		req, err := wasmkeep.NewRequest("POST", q.Get("path"), make([]byte, size))
		must(err)
		req.Header.Set("X-Wasmkeep-Caller", "default/forged/by-the-caller")
		resp, err := wasmkeep.Call(q.Get("to"), req)
		if ce, ok := err.(*wasmkeep.CallError); ok {
			fmt.Fprintf(w, "call-error %s: %s", ce.Kind, ce.Message)
			return
		}
		must(err)
		fmt.Fprintf(w, "%d %s", resp.StatusCode, resp.Body)
	case "/fetch":
		// Fetches ?url= (with a per-step ?timeout= in ms) and answers
		// "<status> <body>", "fetch-error <kind>: <message>" or "bad-url: ...".
		req, err := wasmkeep.FetchRequest("GET", q.Get("url"), nil)
		if err != nil {
			fmt.Fprintf(w, "bad-url: %v", err)
			return
		}
		ms, _ := strconv.Atoi(q.Get("timeout"))
		resp, err := wasmkeep.FetchWithTimeout(req, time.Duration(ms)*time.Millisecond)
		if fe, ok := err.(*wasmkeep.FetchError); ok {
			fmt.Fprintf(w, "fetch-error %s: %s", fe.Kind, fe.Message)
			return
		}
		must(err)
		fmt.Fprintf(w, "%d %s", resp.StatusCode, resp.Body)
	case "/caller":
		fmt.Fprintf(w, "%q", r.Header.Values("X-Wasmkeep-Caller"))
	case "/delete":
		// Deletes the actor (durably with ?durable=1, inside a transaction
		// with ?tx=1), then tries to write: "<delete result>; <write result>".
		if q.Get("tx") == "1" {
			must2(wasmkeep.Exec("BEGIN"))
		}
		del := wasmkeep.DeleteSelf
		if q.Get("durable") == "1" {
			del = wasmkeep.DeleteSelfDurable
		}
		err := del()
		_, werr := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS after_delete (v)")
		fmt.Fprintf(w, "%v; %v", err, werr)
	case "/alarm-set": // ?in= ms from now (the wall clock), or ?at= ms since the epoch; ?durable=1 makes it durable within the event
		at, err := strconv.ParseInt(q.Get("at"), 10, 64)
		if err != nil {
			ms, _ := strconv.Atoi(q.Get("in"))
			at = time.Now().UnixMilli() + int64(ms)
		}
		wasmkeep.SetAlarm(at)
		if q.Get("durable") == "1" { // made durable within the event, by an exec-durable after it
			_, err := wasmkeep.ExecDurable("CREATE TABLE IF NOT EXISTS alarm_durable (v)")
			answer(w, "set", err)
			return
		}
		fmt.Fprint(w, "set")
	case "/alarm-get": // "in <ms from now>", or with ?at=1 "at <ms since the epoch>"
		if at, ok := wasmkeep.GetAlarm(); !ok {
			fmt.Fprint(w, "none")
		} else if q.Get("at") != "" {
			fmt.Fprintf(w, "at %d", at)
		} else {
			fmt.Fprintf(w, "in %d", at-time.Now().UnixMilli())
		}
	case "/alarm-clear":
		wasmkeep.ClearAlarm()
		fmt.Fprint(w, "cleared")
	case "/alarm-set-spin": // the alarm committed, then an event that never ends: a test kills the node in it
		ms, _ := strconv.Atoi(q.Get("in"))
		wasmkeep.SetAlarm(time.Now().UnixMilli() + int64(ms))
		fmt.Println("alarm-set-spin: the alarm is committed")
		for {
		}
	case "/mirror":
		w.Write(r.Body)
	case "/numbers":
		rows, err := wasmkeep.Query("SELECT ?, ?, ?, ?, ?, NULL", int64(math.MinInt64), int64(math.MaxInt64), 0.1, math.Inf(-1), math.Copysign(0, -1))
		must(err)
		for rows.Next() {
			var a, b int64
			var c, d, e float64
			var n any
			must(rows.Scan(&a, &b, &c, &d, &e, &n))
			fmt.Fprintf(w, "%d %d %v %v %v %v", a, b, c, d, math.Signbit(e), n)
		}
	case "/spin":
		for {
		}
	case "/alloc":
		mb, _ := strconv.Atoi(q.Get("mb"))
		b := make([]byte, mb<<20)
		b[len(b)-1] = 1
		fmt.Fprintf(w, "%d", len(b))
	case "/trap-in-tx":
		must2(wasmkeep.Exec("CREATE TABLE IF NOT EXISTS t (v)"))
		must2(wasmkeep.Exec("BEGIN"))
		must2(wasmkeep.Exec("INSERT INTO t VALUES (1)"))
		os.Exit(3) // proc_exit: the guest cannot recover from it
	case "/fail-in-tx":
		must2(wasmkeep.Exec("CREATE TABLE IF NOT EXISTS t (v)"))
		must2(wasmkeep.Exec("BEGIN"))
		must2(wasmkeep.Exec("INSERT INTO t VALUES (1)"))
		panic("handler failed inside a transaction")
	case "/deadlock":
		select {} // every goroutine asleep: the Go runtime traps
	case "/headers":
		for k, vs := range r.Header {
			fmt.Fprintf(w, "%s=%s\n", strings.ToLower(k), strings.Join(vs, ","))
		}
	case "/echo":
		fmt.Fprintf(w, "%s %s?%s %d", r.Method, r.URL.Path, r.URL.RawQuery, len(r.Body))
	case "/self":
		a := wasmkeep.Self()
		fmt.Fprintf(w, "%s/%s/%s", a.Tenant, a.Class, a.Name)
	case "/env":
		if v, ok := wasmkeep.Env(q.Get("name")); ok {
			fmt.Fprintf(w, "set %s", v)
		} else {
			w.Write([]byte("unset"))
		}
	case "/log":
		fmt.Println("line one")
		fmt.Fprintln(os.Stderr, "to stderr \x1b[31mred")
		w.Write([]byte("logged"))
	case "/flood":
		n, _ := strconv.Atoi(q.Get("n"))
		for i := range n {
			fmt.Println("flood", i)
		}
		w.Write([]byte("flooded"))
	case "/status":
		code, _ := strconv.Atoi(q.Get("code"))
		w.Header().Set("X-Probe", "yes")
		w.Header().Set("X-Wasmkeep-Not-Held", "forged") // only a node says that: dropped
		w.WriteHeader(code)
		w.Write([]byte("status"))
	default:
		wasmkeep.Error(w, "no such probe "+r.URL.Path, 404)
	}
}

// answer writes "ok <v>" or "error <kind>: <message>".
func answer(w wasmkeep.ResponseWriter, v string, err error) {
	if err == nil {
		fmt.Fprintf(w, "ok %s", v)
		return
	}
	if se, ok := err.(*wasmkeep.SQLError); ok {
		fmt.Fprintf(w, "error %s: %s", se.Kind, se.Message)
		return
	}
	fmt.Fprintf(w, "error %v", err)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func must2(_ int64, err error) { must(err) }

func main() {}
