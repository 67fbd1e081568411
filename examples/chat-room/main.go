//go:build wasip1

// Chat-room is one actor per room (/actor/chat/<room>): every client that
// connects over WebSocket gets the room's recent history, every message is
// kept in the room's SQLite database and broadcast to everyone connected, and
// leaving is announced. The sockets belong to the host, so a room that
// hibernates keeps its clients; the next message wakes it. GET returns the
// history as text.
package main

import (
	"strconv"
	"strings"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// historyLen is how many past messages a newcomer receives.
const historyLen = 50

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
		return err
	})
	wasmkeep.OnWebSocketOpen(func(conn uint64, path string) error {
		rows, err := wasmkeep.Query("SELECT body FROM (SELECT id, body FROM messages ORDER BY id DESC LIMIT ?) ORDER BY id", historyLen)
		if err != nil {
			return err
		}
		for rows.Next() {
			var body string
			if err := rows.Scan(&body); err != nil {
				return err
			}
			wasmkeep.Send(conn, body) // queued: the client sees it once connected
		}
		return nil
	})
	wasmkeep.OnWebSocketMessage(func(conn uint64, msg wasmkeep.Message) {
		say("#" + strconv.FormatUint(conn, 10) + ": " + strings.TrimSpace(msg.Text()))
	})
	wasmkeep.OnWebSocketClose(func(conn uint64, code int, reason string) {
		say("#" + strconv.FormatUint(conn, 10) + " left")
	})
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		rows, err := wasmkeep.Query("SELECT body FROM messages ORDER BY id")
		if err != nil {
			wasmkeep.Error(w, err.Error(), 500)
			return
		}
		for rows.Next() {
			var body string
			rows.Scan(&body)
			w.Write([]byte(body + "\n"))
		}
	})
}

// say keeps a line in the history and sends it to everyone in the room. A
// client too slow to keep up misses the line (backpressure), not the others.
func say(line string) {
	if _, err := wasmkeep.Exec("INSERT INTO messages (body) VALUES (?)", line); err != nil {
		panic(err)
	}
	for _, c := range wasmkeep.Connections() {
		wasmkeep.Send(c, line)
	}
}

func main() {}
