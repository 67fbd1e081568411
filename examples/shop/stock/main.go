//go:build wasip1

// Stock is one item's stock (/actor/stock/<item>), the back of the shop
// example, served with --access stock=internal so that only actors reach
// it: POST /reserve takes one unit for the calling cart. The host sets
// X-Wasmkeep-Caller on calls and removes it from outside requests, so stock
// can trust it to know which cart reserved. STOCK in the class's --env file
// (default 5) is how many units a new item starts with.
package main

import (
	"errors"
	"strconv"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		for _, sql := range []string{
			"CREATE TABLE IF NOT EXISTS stock (id INTEGER PRIMARY KEY CHECK (id = 1), units INTEGER NOT NULL)",
			"CREATE TABLE IF NOT EXISTS reservations (cart TEXT PRIMARY KEY, units INTEGER NOT NULL)",
		} {
			if _, err := wasmkeep.Exec(sql); err != nil {
				return err
			}
		}
		units := 5
		if s, ok := wasmkeep.Env("STOCK"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return errors.New("STOCK must be a whole number")
			}
			units = n
		}
		_, err := wasmkeep.Exec("INSERT OR IGNORE INTO stock VALUES (1, ?)", units)
		return err
	})
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	cart := r.Header.Get("X-Wasmkeep-Caller")
	switch {
	case r.Method != "POST" || r.URL.Path != "/reserve":
		wasmkeep.Error(w, "POST /reserve reserves one unit", 404)
		return
	case cart == "":
		// The host removes the header from outside requests, should stock
		// be served without --access stock=internal.
		wasmkeep.Error(w, "only actors reserve", 403)
		return
	}
	var units int64
	if err := wasmkeep.QueryRow("SELECT units FROM stock").Scan(&units); err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	if units == 0 {
		wasmkeep.Error(w, "out of stock", 409)
		return
	}
	if err := reserve(cart); err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	w.Write([]byte("reserved for " + cart + ", " + strconv.FormatInt(units-1, 10) + " left\n"))
}

// reserve takes one unit for cart. One event at a time: nothing takes the
// unit between serve's read and these writes. An error leaves the
// transaction open, and the host rolls it back when the event ends.
func reserve(cart string) error {
	if _, err := wasmkeep.Exec("BEGIN"); err != nil {
		return err
	}
	if _, err := wasmkeep.Exec("UPDATE stock SET units = units - 1"); err != nil {
		return err
	}
	if _, err := wasmkeep.Exec("INSERT INTO reservations VALUES (?, 1) ON CONFLICT (cart) DO UPDATE SET units = units + 1", cart); err != nil {
		return err
	}
	_, err := wasmkeep.Exec("COMMIT")
	return err
}

func main() {}
