//go:build wasip1

// Room is the WebSocket tests' actor: a chat room that broadcasts every
// message to all its connections. A path holding "refuse" is refused; the
// message "close" closes the sender's socket with 4000; "flood N" sends N
// messages of 64 KiB to the sender and answers how many were refused. GET
// /closes lists the close events seen.
package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS closes (conn INTEGER, code INTEGER, reason TEXT)")
		return err
	})
	wasmkeep.OnWebSocketOpen(func(conn uint64, path string) error {
		if strings.Contains(path, "refuse") {
			return errors.New("not welcome: " + path)
		}
		return wasmkeep.Send(conn, "welcome "+strconv.Itoa(len(wasmkeep.Connections())+1))
	})
	wasmkeep.OnWebSocketMessage(func(conn uint64, msg wasmkeep.Message) {
		text := msg.Text()
		switch {
		case text == "close":
			wasmkeep.CloseSocket(conn, 4000, "bye")
			return
		case strings.HasPrefix(text, "flood "):
			n, _ := strconv.Atoi(strings.TrimPrefix(text, "flood "))
			big := make([]byte, 64<<10)
			refused := 0
			for range n {
				if err := wasmkeep.SendBinary(conn, big); errors.Is(err, wasmkeep.SendBackpressure) {
					refused++
				}
			}
			wasmkeep.Send(conn, "refused "+strconv.Itoa(refused))
			return
		}
		for _, c := range wasmkeep.Connections() {
			if msg.Binary {
				wasmkeep.SendBinary(c, msg.Data)
			} else {
				wasmkeep.Send(c, text)
			}
		}
	})
	wasmkeep.OnWebSocketClose(func(conn uint64, code int, reason string) {
		if _, err := wasmkeep.Exec("INSERT INTO closes VALUES (?, ?, ?)", int64(conn), int64(code), reason); err != nil {
			panic(err)
		}
	})
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		rows, err := wasmkeep.Query("SELECT code, reason FROM closes ORDER BY rowid")
		if err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		for rows.Next() {
			var code int64
			var reason string
			rows.Scan(&code, &reason)
			fmt.Fprintf(w, "%d %s\n", code, reason)
		}
	})
}

func main() {}
