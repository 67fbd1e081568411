//go:build wasip1

// Wfdriver drives workflow instances with the Go client, for the workflow
// tests; testdata/guests/cwfdriver has the same routes in C. Every route
// takes ?class=C&id=X:
//
//	POST /start   (body: the input)   the status
//	GET  /status                      the status
//	POST /event?name=N (body: payload) "ok"
//	POST /cancel                      the status
//	GET  /result                      "pending", or "done OUTPUT"
//
// A status is one line: "STATE wake=yes|no waiting=NAMES positions=N
// output=OUTPUT|- error=ERROR". A client error answers 502 with "KIND:
// MESSAGE". POST /count?key=K adds one to a counter and answers it, GET
// /count?key=K answers it: the workflow's steps count their runs there.
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
	"github.com/wasmkeep/wasmkeep/sdk/go/workflow"
)

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL)")
		return err
	})
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	q := r.URL.Query()
	if r.URL.Path == "/count" {
		if r.Method == "POST" {
			if _, err := wasmkeep.ExecDurable("INSERT INTO counts (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1", q.Get("key")); err != nil {
				wasmkeep.Error(w, err.Error(), 500)
				return
			}
		}
		var n int64
		if err := wasmkeep.QueryRow("SELECT n FROM counts WHERE key = ?", q.Get("key")).Scan(&n); err != nil && err != wasmkeep.ErrNoRows {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		w.Write([]byte(strconv.FormatInt(n, 10) + "\n"))
		return
	}
	c := workflow.New(q.Get("class"))
	id := q.Get("id")
	var s *workflow.Status
	var err error
	switch r.URL.Path {
	case "/start":
		s, err = c.Start(id, r.Body)
	case "/status":
		s, err = c.Status(id)
	case "/cancel":
		s, err = c.Cancel(id)
	case "/event":
		if err = c.SendEvent(id, q.Get("name"), r.Body); err == nil {
			w.Write([]byte("ok\n"))
			return
		}
	case "/result":
		var out []byte
		var done bool
		if out, done, err = c.Result(id); err == nil {
			if done {
				w.Write([]byte("done " + string(out) + "\n"))
			} else {
				w.Write([]byte("pending\n"))
			}
			return
		}
	default:
		wasmkeep.Error(w, "no such route", 404)
		return
	}
	var e *workflow.Error
	if errors.As(err, &e) {
		wasmkeep.Error(w, e.Kind.String()+": "+e.Message, 502)
		return
	}
	w.Write([]byte(line(s)))
}

func line(s *workflow.Status) string {
	wake, out := "no", "-"
	if s.WakeAt != 0 {
		wake = "yes"
	}
	if s.Output != nil {
		out = string(s.Output)
	}
	return s.State.String() + " wake=" + wake + " waiting=" + strings.Join(s.WaitingFor, ",") +
		" positions=" + strconv.Itoa(s.Positions) + " output=" + out + " error=" + s.Error + "\n"
}

func main() {}
