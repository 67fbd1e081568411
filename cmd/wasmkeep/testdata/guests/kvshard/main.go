//go:build wasip1

// Kvshard is a key-value shard with code of its own, built from the
// pieces of sdk/go/kv: GET /rows answers anyone with the number of rows in
// the shard's table, expired ones included, so that a test can see the
// alarm delete them; everything else is the shard's protocol.
package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	handle := kv.HandleAllowing(func(caller string) bool { return !strings.HasSuffix(caller, "/client/denied") })
	wasmkeep.OnInit(kv.Init)
	wasmkeep.OnAlarm(kv.Alarm)
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		if r.Method == "GET" && r.URL.Path == "/rows" {
			var n int64
			if err := wasmkeep.QueryRow("SELECT count(*) FROM wasmkeep_kv").Scan(&n); err != nil {
				wasmkeep.Error(w, err.Error(), 500)
				return
			}
			w.Write([]byte(strconv.FormatInt(n, 10) + "\n"))
			return
		}
		if r.Method == "POST" && r.URL.Path == "/fill" {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			now := time.Now().UnixMilli()
			if _, err := wasmkeep.Exec(`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
				INSERT INTO wasmkeep_kv (key, value, version, expires_at) SELECT CAST('fill:' || i AS BLOB), x'', i, ? FROM s`,
				n, now-1000); err != nil {
				wasmkeep.Error(w, err.Error(), 500)
				return
			}
			wasmkeep.SetAlarm(now)
			return
		}
		handle(w, r)
	})
}

func main() {}
