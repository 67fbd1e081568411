//go:build wasip1

// Schema is one app's class in two versions, two builds of this source:
// -X main.version=2 is the second, whose on-init migrates what the first
// made (a table added). Each on-init records its version, so a test sees
// which ran; a request answers the version serving it, the on-inits run,
// the requests its instance has seen (reset when the instance is new) and
// the GREETING value.
package main

import (
	"fmt"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

var version = "1"

var hits int // requests this instance served

func init() {
	wasmkeep.OnInit(func() error {
		if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS inits (version TEXT NOT NULL)"); err != nil {
			return err
		}
		if version == "2" { // the migration: a table the first version does not know
			if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS notes (note TEXT NOT NULL)"); err != nil {
				return err
			}
		}
		_, err := wasmkeep.Exec("INSERT INTO inits (version) VALUES (?)", version)
		return err
	})
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		hits++
		rows, err := wasmkeep.Query("SELECT version FROM inits ORDER BY rowid")
		if err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		var inits []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				wasmkeep.Error(w, err.Error(), 500)
				return
			}
			inits = append(inits, v)
		}
		greeting, _ := wasmkeep.Env("GREETING")
		fmt.Fprintf(w, "version=%s inits=%s hits=%d greeting=%s", version, strings.Join(inits, ","), hits, greeting)
	})
}

func main() {}
