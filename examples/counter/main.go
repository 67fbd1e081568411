//go:build wasip1

// Counter is WasmKeep's showcase actor: one integer per actor name, kept in
// the actor's own SQLite database. GET answers it, POST adds one and answers
// the new value; POST to the actor's /durable does so with exec-durable.
package main

import (
	"strconv"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
		return err
	})
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	switch r.Method {
	case "POST":
		// POST .../durable answers once the write is on disk, as a Durable
		// Object's write does; bench/ compares both kinds with workerd.
		exec := wasmkeep.Exec
		if r.URL.Path == "/durable" {
			exec = wasmkeep.ExecDurable
		}
		if _, err := exec("INSERT INTO counter VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET value = value + 1"); err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
	case "GET":
	default:
		w.Header().Set("Allow", "GET, POST")
		wasmkeep.Error(w, "method not allowed", 405)
		return
	}
	var n int64
	if err := wasmkeep.QueryRow("SELECT ifnull(max(value), 0) FROM counter").Scan(&n); err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	w.Write(strconv.AppendInt(nil, n, 10))
	w.Write([]byte("\n"))
}

func main() {}
