//go:build wasip1

// The jobs app's front, served as "app": the one class outside clients
// reach. It uses the three patterns of sdk/go through their clients:
//
//	POST /jobs               queue a job (the body) on queue/jobs
//	GET  /jobs/<id>          the job's result, from the key-value store
//	GET  /jobs               the queue's counts and its dead letters
//	PUT  /kv/<key>           store the body under key; GET /kv/<key> reads it
//	POST /orders/<id>        start the order workflow (the body is its input)
//	POST /orders/<id>/approve  send it the event "approved"
//	GET  /orders/<id>        its status
//
// examples/jobs/README.md has a session to replay with curl.
package main

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/queue"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
	"github.com/wasmkeep/wasmkeep/sdk/go/workflow"
)

var (
	store  = kv.New("kv", 8) // every caller of the store uses the same shard count
	jobs   = queue.New("queue/jobs")
	orders = workflow.New("orders")
)

func init() { wasmkeep.HandleFunc(serve) }

func serve(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var err error
	switch {
	case r.Method == "POST" && len(parts) == 1 && parts[0] == "jobs":
		err = sendJob(w, r.Body)
	case r.Method == "GET" && len(parts) == 1 && parts[0] == "jobs":
		err = jobStats(w)
	case r.Method == "GET" && len(parts) == 2 && parts[0] == "jobs":
		err = jobResult(w, parts[1])
	case len(parts) == 2 && parts[0] == "kv":
		err = keyValue(w, r, parts[1])
	case len(parts) >= 2 && parts[0] == "orders":
		err = order(w, r, parts[1], parts[2:])
	default:
		wasmkeep.Error(w, "not found: see examples/jobs/README.md for the routes", 404)
		return
	}
	if err != nil {
		// A failed call may or may not have applied (sdk/go/README.md).
		wasmkeep.Error(w, err.Error(), 502)
	}
}

func sendJob(w wasmkeep.ResponseWriter, body []byte) error {
	id, err := jobs.Send(body)
	if err != nil {
		return err
	}
	w.Write([]byte("job " + strconv.FormatUint(id, 10) + " queued\n"))
	return nil
}

func jobResult(w wasmkeep.ResponseWriter, id string) error {
	e, err := store.Get("job:" + id)
	if err != nil {
		return err
	}
	if e == nil {
		wasmkeep.Error(w, "job "+id+": no result yet", 404)
		return nil
	}
	w.Write(append(e.Value, '\n'))
	return nil
}

func jobStats(w wasmkeep.ResponseWriter) error {
	s, err := jobs.Stats()
	if err != nil {
		return err
	}
	dead, err := jobs.DeadLetters(10)
	if err != nil {
		return err
	}
	b := []byte("ready " + strconv.FormatUint(s.Ready, 10) + ", delayed " + strconv.FormatUint(s.Delayed, 10) +
		", in flight " + strconv.FormatUint(s.InFlight, 10) + ", dead " + strconv.FormatUint(s.Dead, 10) + "\n")
	for _, d := range dead {
		b = append(b, "dead: job "+strconv.FormatUint(d.ID, 10)+" ("+string(d.Body)+") after "+
			strconv.FormatUint(uint64(d.Attempts), 10)+" attempts: "+d.Reason+"\n"...)
	}
	w.Write(b)
	return nil
}

func keyValue(w wasmkeep.ResponseWriter, r *wasmkeep.Request, key string) error {
	switch r.Method {
	case "PUT":
		v, err := store.Put(key, r.Body)
		if err != nil {
			return err
		}
		w.Write([]byte("version " + strconv.FormatUint(v, 10) + "\n"))
	case "GET":
		e, err := store.Get(key)
		if err != nil {
			return err
		}
		if e == nil {
			wasmkeep.Error(w, "no key "+key, 404)
			return nil
		}
		w.Write(append(e.Value, '\n'))
	default:
		w.Header().Set("Allow", "GET, PUT")
		wasmkeep.Error(w, "method not allowed", 405)
	}
	return nil
}

func order(w wasmkeep.ResponseWriter, r *wasmkeep.Request, id string, rest []string) error {
	var s *workflow.Status
	var err error
	switch {
	case r.Method == "POST" && len(rest) == 0:
		s, err = orders.Start(id, r.Body)
	case r.Method == "POST" && len(rest) == 1 && rest[0] == "approve":
		if err = orders.SendEvent(id, "approved", nil); err == nil {
			s, err = orders.Status(id)
		}
	case r.Method == "GET" && len(rest) == 0:
		s, err = orders.Status(id)
	default:
		wasmkeep.Error(w, "not found: see examples/jobs/README.md for the routes", 404)
		return nil
	}
	if errors.Is(err, workflow.ErrUnknown) {
		wasmkeep.Error(w, "no order "+id, 404)
		return nil
	}
	if errors.Is(err, workflow.ErrFinished) {
		wasmkeep.Error(w, "order "+id+" is finished", 409)
		return nil
	}
	if err != nil {
		return err
	}
	b := []byte("order " + id + ": " + s.State.String())
	switch {
	case s.Output != nil:
		b = append(b, ", "+string(s.Output)...)
	case s.Error != "":
		b = append(b, ", "+s.Error...)
	case len(s.WaitingFor) > 0:
		b = append(b, ", waiting for "+strings.Join(s.WaitingFor, ", ")...)
	case s.WakeAt > 0:
		b = append(b, ", wakes in "+strconv.FormatInt(max(s.WakeAt-time.Now().UnixMilli(), 0)/1000, 10)+" s"...)
	}
	w.Write(append(b, '\n'))
	return nil
}

func main() {}
