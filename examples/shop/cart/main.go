//go:build wasip1

// Cart is one user's shopping cart (/actor/cart/<user>), the front of the
// shop example: POST /<item> reserves one unit by calling the item's stock
// actor, then adds it to the cart; GET lists the cart.
package main

import (
	"strconv"
	"strings"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS items (item TEXT PRIMARY KEY, quantity INTEGER NOT NULL)")
		return err
	})
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	switch r.Method {
	case "GET":
		list(w)
	case "POST":
		add(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		wasmkeep.Error(w, "method not allowed", 405)
	}
}

func add(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	// The escaped segment is the item's actor name as Call wants it.
	item := strings.TrimPrefix(r.URL.EscapedPath(), "/")
	if item == "" || strings.Contains(item, "/") {
		wasmkeep.Error(w, "POST /<item> adds one item", 404)
		return
	}
	req, err := wasmkeep.NewRequest("POST", "/reserve", nil)
	if err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	resp, err := wasmkeep.Call("stock/"+item, req)
	if err != nil {
		wasmkeep.Error(w, "stock: "+err.Error(), 502)
		return
	}
	if resp.StatusCode != 200 {
		// Out of stock (409) or any other refusal: the user sees stock's answer.
		w.WriteHeader(resp.StatusCode)
		w.Write(resp.Body)
		return
	}
	// Should this write fail, the unit stays reserved: a real shop would
	// release it, or let reservations expire with an alarm.
	if _, err := wasmkeep.Exec("INSERT INTO items VALUES (?, 1) ON CONFLICT (item) DO UPDATE SET quantity = quantity + 1", strings.TrimPrefix(r.URL.Path, "/")); err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	w.Write(resp.Body)
}

func list(w wasmkeep.ResponseWriter) {
	rows, err := wasmkeep.Query("SELECT item, quantity FROM items ORDER BY item")
	if err != nil {
		wasmkeep.Error(w, err.Error(), 500)
		return
	}
	for rows.Next() {
		var item string
		var quantity int64
		if err := rows.Scan(&item, &quantity); err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		w.Write([]byte(item + " " + strconv.FormatInt(quantity, 10) + "\n"))
	}
}

func main() {}
