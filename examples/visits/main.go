//go:build wasip1

// Visits is the actor of the book's tutorial: GET /actor/visits/home?who=alice
// records a visit by alice and answers "hello alice, you are visitor number 1".
package main

import (
	"strconv"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	// Runs once per actor (and again after you deploy a new version):
	// create your tables here.
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS visits (who TEXT NOT NULL)")
		return err
	})
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		who := r.URL.Query().Get("who")
		if who == "" {
			who = "someone"
		}
		var n int64
		_, err := wasmkeep.Exec("INSERT INTO visits (who) VALUES (?)", who)
		if err == nil {
			err = wasmkeep.QueryRow("SELECT count(*) FROM visits").Scan(&n)
		}
		if err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		w.Write([]byte("hello " + who + ", you are visitor number " + strconv.FormatInt(n, 10) + "\n"))
	})
}

func main() {}
