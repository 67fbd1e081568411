//go:build wasip1

// The jobs app's worker, served as "worker": queue/jobs pushes its messages
// to worker/main in batches. Each job is a line of text; the worker counts
// its words and keeps the result in the key-value store under job:<id>,
// where the app reads it. A job whose text is "fail" fails every attempt,
// so the queue retries it with its backoff and dead-letters it after the
// last (examples/jobs/README.md).
package main

import (
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/kv"
	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/queue"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

var results = kv.New("kv", 8)

func init() {
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		if !queue.IsDelivery(r) {
			wasmkeep.Error(w, "the worker takes deliveries from queue/jobs only", 404)
			return
		}
		queue.HandleDelivery(w, r, work)
	})
}

// work runs one job. The queue delivers at least once, so the same job may
// come again (same id, higher attempt): writing its result under its id
// makes a second run harmless.
func work(_ string, m queue.Message) queue.Outcome {
	text := string(m.Body)
	if text == "fail" {
		return queue.Retry() // the queue's backoff, then its dead letters
	}
	result := strconv.Itoa(len(strings.Fields(text))) + " words (attempt " + strconv.FormatUint(uint64(m.Attempt), 10) + ")"
	if _, err := results.Put(jobKey(m.ID), []byte(result)); err != nil {
		return queue.Retry()
	}
	return queue.Ack()
}

func jobKey(id uint64) string { return "job:" + strconv.FormatUint(id, 10) }

func main() {}
