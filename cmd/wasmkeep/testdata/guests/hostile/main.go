//go:build wasip1

// hostile spends an event's CPU in host calls, for the budget tests and the
// hostile-neighbour benchmark: long statements, and loops of cheap host
// calls that its own CPU budget alone would never stop; and in memory
// growth and a loop of its own.
package main

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// takePending reads a pending payload; with none pending it returns -1 at
// once, which makes it the cheapest host call there is.
//
//go:wasmimport wasmkeep take_pending
func takePending(ptr unsafe.Pointer) int32

//go:wasmimport wasmkeep sql_query
func sqlQuery(sql string, params unsafe.Pointer, paramsLen uint32, out unsafe.Pointer, outCap uint32) int32

// series is the numbers 1 to ?: a statement whose CPU grows with ?.
const series = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < ?) "

// hits lives in the instance: it restarts from zero when the instance does.
var hits int

func main() {}

func init() {
	wasmkeep.HandleFunc(serve)
}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	hits++
	q := r.URL.Query()
	n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
	switch r.URL.Path {
	case "/hits":
		answer(w, int64(hits), nil)
	case "/count":
		// One row, n steps of SQL: "ok <n>".
		var got int64
		err := wasmkeep.QueryRow(series+"SELECT count(*) FROM c", n).Scan(&got)
		answer(w, got, err)
	case "/rows":
		// n rows in the result, which the guest leaves pending rather than
		// decode (the SDK's decoding is guest CPU): "ok <its size>".
		params := abi.AppendValues(nil, []abi.Value{{Kind: abi.KindInteger, Int: n}})
		var out [8]byte
		size := sqlQuery(series+"SELECT x FROM c", unsafe.Pointer(&params[0]), uint32(len(params)), unsafe.Pointer(&out[0]), 0)
		if size < 0 {
			answer(w, 0, fmt.Errorf("the query failed (%d bytes of error)", -size))
			return
		}
		answer(w, int64(size), nil)
	case "/fill":
		// Adds n MiB to the database.
		if _, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS fill (b BLOB)"); err != nil {
			answer(w, 0, err)
			return
		}
		got, err := wasmkeep.Exec("INSERT INTO fill "+series+"SELECT zeroblob(1048576) FROM c", n)
		answer(w, got, err)
	case "/delete":
		answer(w, 0, wasmkeep.DeleteSelfDurable())
	case "/new":
		// Whether the actor is new: "ok 0" if it has no table fill.
		var got int64
		err := wasmkeep.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'fill'").Scan(&got)
		answer(w, got, err)
	case "/instr":
		// One SQL function call on big arguments: n KiB of needle that is
		// nowhere in 16 MB of haystack, though its every prefix is.
		hay := strings.Repeat("a", 16<<20-1024)
		needle := strings.Repeat("a", int(n)<<10) + "b"
		var got int64
		err := wasmkeep.QueryRow("SELECT instr(?, ?)", hay, needle).Scan(&got)
		answer(w, got, err)
	case "/loop":
		// Host calls until the host stops the event.
		loop(q.Get("call"))
	case "/grow":
		// n MiB of new memory, every page of it written.
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		kept = b
		answer(w, n, nil)
	case "/spin":
		// Guest code until the host stops the event.
		for {
			hits++
		}
	default:
		wasmkeep.Error(w, "no such path "+r.URL.Path, 404)
	}
}

// kept holds what /grow allocated, until the next /grow.
var kept []byte

func loop(call string) {
	switch call {
	case "alarm":
		for {
			wasmkeep.GetAlarm()
		}
	case "pending":
		var b [8]byte
		for {
			takePending(unsafe.Pointer(&b[0]))
		}
	case "bad-sql":
		for {
			wasmkeep.Exec("SELEC nothing")
		}
	}
	panic("no such loop " + call)
}

// answer writes "ok <v>" or "error <kind>: <message>".
func answer(w wasmkeep.ResponseWriter, v int64, err error) {
	if se, ok := err.(*wasmkeep.SQLError); ok {
		fmt.Fprintf(w, "error %s: %s", se.Kind, se.Message)
		return
	}
	if err != nil {
		fmt.Fprintf(w, "error %v", err)
		return
	}
	fmt.Fprintf(w, "ok %d", v)
}
