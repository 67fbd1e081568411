//go:build wasip1

// A test actor for sdk/go/queue, with the same routes as the C one
// (testdata/guests/cqueueclient): a producer and pull consumer of the queue
// ?q=class/name, and a push consumer that records each delivery and acts on
// the body ("retry", "after:<ms>", "crash": trap on the first attempt,
// "fail": trap always, anything else ack). Answers are text; a client
// error is "error <kind> <status>: <message>".
package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/queue"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	wasmkeep.OnInit(func() error {
		_, err := wasmkeep.Exec("CREATE TABLE IF NOT EXISTS deliveries (seq INTEGER PRIMARY KEY, queue TEXT, id INTEGER, attempt INTEGER, body BLOB)")
		return err
	})
	wasmkeep.HandleFunc(serve)
}

func main() {}

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	if queue.IsDelivery(r) {
		queue.HandleDelivery(w, r, consume)
		return
	}
	p := r.URL.Query()
	q := queue.New(p.Get("q"))
	num := func(name string) int64 {
		v, _ := strconv.ParseInt(p.Get(name), 10, 64)
		return v
	}
	lease := func() queue.Message {
		return queue.Message{ID: uint64(num("id")), Attempt: uint32(num("attempt"))}
	}
	var out strings.Builder
	var err error
	switch r.URL.Path {
	case "/send":
		var id uint64
		id, err = q.SendDelayed(r.Body, num("delay"))
		out.WriteString(strconv.FormatUint(id, 10))
	case "/batch":
		var bodies [][]byte
		for _, line := range strings.Split(string(r.Body), "\n") {
			bodies = append(bodies, []byte(line))
		}
		var ids []uint64
		ids, err = q.SendBatch(bodies)
		for i, id := range ids {
			if i > 0 {
				out.WriteByte(' ')
			}
			out.WriteString(strconv.FormatUint(id, 10))
		}
	case "/lease":
		var ms []queue.Message
		ms, err = q.Lease(int(num("max")), num("vis"))
		for _, m := range ms {
			out.WriteString(strconv.FormatUint(m.ID, 10) + " " + strconv.FormatUint(uint64(m.Attempt), 10) + " " + string(m.Body) + "\n")
		}
	case "/ack", "/retry":
		var current bool
		switch {
		case r.URL.Path == "/ack":
			current, err = q.Ack(lease())
		case p.Has("after"):
			current, err = q.RetryAfter(lease(), num("after"))
		default:
			current, err = q.Retry(lease())
		}
		out.WriteString(map[bool]string{true: "current", false: "stale"}[current])
	case "/settle":
		var items []queue.Settlement
		for _, line := range strings.Split(string(r.Body), "\n") {
			f := strings.Fields(line)
			id, _ := strconv.ParseUint(f[0], 10, 64)
			attempt, _ := strconv.ParseUint(f[1], 10, 32)
			items = append(items, queue.Settlement{ID: id, Attempt: uint32(attempt), Outcome: outcome(f[2])})
		}
		var current []bool
		current, err = q.Settle(items)
		for i, c := range current {
			if i > 0 {
				out.WriteByte(' ')
			}
			out.WriteString(map[bool]string{true: "1", false: "0"}[c])
		}
	case "/stats":
		var s queue.Stats
		s, err = q.Stats()
		out.WriteString("ready " + strconv.FormatUint(s.Ready, 10) + " delayed " + strconv.FormatUint(s.Delayed, 10) +
			" inflight " + strconv.FormatUint(s.InFlight, 10) + " dead " + strconv.FormatUint(s.Dead, 10))
	case "/dead":
		var ds []queue.DeadLetter
		ds, err = q.DeadLetters(int(num("limit")))
		for _, d := range ds {
			out.WriteString(strconv.FormatUint(d.ID, 10) + " " + strconv.FormatUint(uint64(d.Attempts), 10) + " " + d.Reason + " | " + string(d.Body) + "\n")
		}
	case "/deliveries":
		rows, qerr := wasmkeep.Query("SELECT queue, id, attempt, body FROM deliveries ORDER BY seq")
		if qerr != nil {
			wasmkeep.Error(w, qerr.Error(), 500)
			return
		}
		for rows.Next() {
			var name, body string
			var id, attempt int64
			rows.Scan(&name, &id, &attempt, &body)
			out.WriteString(name + " " + strconv.FormatInt(id, 10) + " " + strconv.FormatInt(attempt, 10) + " " + body + "\n")
		}
	default:
		wasmkeep.Error(w, "no such route", 404)
		return
	}
	if err != nil {
		var e *queue.Error
		if !errors.As(err, &e) {
			panic(err)
		}
		out.Reset()
		out.WriteString("error " + e.Kind.String() + " " + strconv.Itoa(e.Status) + ": " + e.Message)
	}
	w.Write([]byte(out.String()))
}

func outcome(s string) queue.Outcome {
	if s == "retry" {
		return queue.Retry()
	}
	if ms, ok := strings.CutPrefix(s, "after:"); ok {
		n, _ := strconv.ParseInt(ms, 10, 64)
		return queue.RetryAfter(n)
	}
	return queue.Ack()
}

// consume records a delivery, then acts on its body.
func consume(name string, m queue.Message) queue.Outcome {
	if _, err := wasmkeep.Exec("INSERT INTO deliveries (queue, id, attempt, body) VALUES (?, ?, ?, ?)", name, m.ID, m.Attempt, string(m.Body)); err != nil {
		panic(err)
	}
	body := string(m.Body)
	if body == "fail" || (body == "crash" && m.Attempt == 1) {
		panic("the consumer crashed on message " + strconv.FormatUint(m.ID, 10))
	}
	return outcome(body)
}
