//go:build wasip1

// Rate-limiter keeps one fixed window per key, one actor per key
// (/actor/limit/<key>): POST consumes one request of the window and answers
// how many are left, or 429 once none is; GET answers how many are left. An
// alarm closes each window; a key idle for a whole window deletes itself, so
// unused keys cost nothing. LIMIT (default 10) and WINDOW_MS (default 10000)
// in the class's --env file size the window.
package main

import (
	"errors"
	"strconv"
	"time"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS quota (id INTEGER PRIMARY KEY CHECK (id = 1), used INTEGER NOT NULL)"); err != nil {
			return err
		}
		_, err := wasmkeep.Exec("INSERT OR IGNORE INTO quota VALUES (1, 0)")
		return err
	})
	wasmkeep.HandleFunc(serve)
	wasmkeep.OnAlarm(closeWindow)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	limit, window, err := config()
	if err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	// Any request creates the key's database, even a refused one: the first
	// of a window sets the alarm that closes it, so an idle key always
	// deletes itself.
	now := time.Now().UnixMilli()
	end, open := wasmkeep.GetAlarm()
	if !open {
		end = now + window
		wasmkeep.SetAlarm(end)
	}
	var used int64
	if err := wasmkeep.QueryRow("SELECT used FROM quota").Scan(&used); err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	switch r.Method {
	case "GET":
	case "POST":
		if used >= limit {
			w.Header().Set("Retry-After", strconv.FormatInt(max((end-now+999)/1000, 1), 10))
			wasmkeep.Error(w, "rate limit exceeded", 429)
			return
		}
		if _, err := wasmkeep.Exec("UPDATE quota SET used = used + 1"); err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		used++
	default:
		w.Header().Set("Allow", "GET, POST")
		wasmkeep.Error(w, "method not allowed", 405)
		return
	}
	w.Write(strconv.AppendInt(nil, limit-used, 10))
	w.Write([]byte("\n"))
}

// closeWindow ends the window. A key that used none of it deletes itself;
// any other starts the next window at once, so that its alarm can tell
// whether the key stays idle.
func closeWindow() error {
	_, window, err := config()
	if err != nil {
		return err
	}
	var used int64
	if err := wasmkeep.QueryRow("SELECT used FROM quota").Scan(&used); err != nil {
		return err
	}
	if used == 0 {
		return wasmkeep.DeleteSelf()
	}
	if _, err := wasmkeep.Exec("UPDATE quota SET used = 0"); err != nil {
		return err
	}
	wasmkeep.SetAlarm(time.Now().UnixMilli() + window)
	return nil
}

// config reads the window's size from the class's configuration, which may
// change between events.
func config() (limit, windowMillis int64, err error) {
	limit, err = positive("LIMIT", 10)
	if err != nil {
		return 0, 0, err
	}
	windowMillis, err = positive("WINDOW_MS", 10000)
	return limit, windowMillis, err
}

func positive(name string, def int64) (int64, error) {
	s, ok := wasmkeep.Env(name)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, errors.New(name + " must be a positive integer")
	}
	return v, nil
}

func main() {}
