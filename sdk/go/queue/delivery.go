package queue

import (
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// IsDelivery reports whether r is a queue's push delivery, for
// HandleDelivery.
func IsDelivery(r *wasmkeep.Request) bool { return r.Method == "POST" && r.URL.Path == deliverPath }

// HandleDelivery answers a push delivery: handle runs once per message, in
// order, with the queue's address ("class/name"), and its Outcome goes back
// to the queue. A handler that panics fails the event: the queue retries
// the whole batch with its backoff. handle must not call the queue that
// delivers (the call would re-enter it and is refused). Requests without
// x-wasmkeep-caller get 403, malformed ones 400.
func HandleDelivery(w wasmkeep.ResponseWriter, r *wasmkeep.Request, handle func(queue string, m Message) Outcome) {
	if r.Header.Get("X-Wasmkeep-Caller") == "" {
		wasmkeep.Error(w, "queue: deliveries come only from queues (x-wasmkeep-caller is missing)", 403)
		return
	}
	in := abi.NewReader(r.Body)
	queue := in.String()
	ms := readMessages(in)
	if err := in.Done(); err != nil {
		wasmkeep.Error(w, "queue: malformed delivery: "+err.Error(), 400)
		return
	}
	out := make([]Settlement, len(ms))
	for i, m := range ms {
		out[i] = Of(m, handle(queue, m))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(appendSettlements(nil, out))
}
