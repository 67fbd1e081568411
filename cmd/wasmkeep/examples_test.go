package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

func missing(path string) bool {
	_, err := os.Stat(path)
	return os.IsNotExist(err)
}

// The shop: a cart reserves through stock, which only actors reach and
// which knows which cart reserved.
func TestExampleShop(t *testing.T) {
	n := startNode(t, node.Options{
		Classes: map[string]string{
			"cart":  buildGuest(t, "examples/shop/cart", ""),
			"stock": buildGuest(t, "examples/shop/stock", ""),
		},
		Access: map[string]access.Access{"stock": mustAccess(t, "internal")},
		Env:    map[string]map[string]string{"stock": {"STOCK": "2"}},
	})
	n.expect("POST", "/actor/cart/alice/apple", "", 200, "reserved for default/cart/alice, 1 left\n")
	n.expect("POST", "/actor/cart/bob/apple", "", 200, "reserved for default/cart/bob, 0 left\n")
	n.expect("POST", "/actor/cart/alice/apple", "", 409, "out of stock\n")
	n.expect("POST", "/actor/cart/alice/pear", "", 200, "reserved for default/cart/alice, 1 left\n")
	n.expect("GET", "/actor/cart/alice", "", 200, "apple 1\npear 1\n")

	const refused = "class \"stock\" is internal: outside requests are refused\n"
	n.expect("POST", "/actor/stock/apple/reserve", "", 403, refused)
	n.expect("POST", "/actor/stock/pear/reserve", "", 403, refused)
}

// The jobs app (examples/jobs/README.md's session): a job goes through the
// queue to the worker, which keeps its result in the key-value store; a job
// that always fails is dead-lettered after the queue's three attempts; the
// order workflow waits for its approval, then completes; the classes
// behind the app refuse outside requests.
func TestExampleJobs(t *testing.T) {
	n := startNode(t, node.Options{
		Classes: map[string]string{
			"app":    buildGuest(t, "examples/jobs/app", ""),
			"kv":     buildGuest(t, "examples/jobs/kv", ""),
			"queue":  buildGuest(t, "examples/jobs/queue", ""),
			"worker": buildGuest(t, "examples/jobs/worker", ""),
			"orders": buildGuest(t, "examples/jobs/orders", ""),
		},
		Access: map[string]access.Access{
			"kv": mustAccess(t, "internal"), "queue": mustAccess(t, "internal"),
			"worker": mustAccess(t, "internal"), "orders": mustAccess(t, "internal"),
		},
		Env: map[string]map[string]string{"orders": {"COOL_OFF_MS": "200", "APPROVAL_TIMEOUT_MS": "60000"}},
	})
	n.expect("POST", "/actor/app/main/jobs", "the quick brown fox", 200, "job 1 queued\n")
	n.expect("POST", "/actor/app/main/jobs", "fail", 200, "job 2 queued\n")
	n.until("GET", "/actor/app/main/jobs/1", "", "4 words (attempt 1)\n")
	n.until("GET", "/actor/app/main/jobs", "", "ready 0, delayed 0, in flight 0, dead 1\n"+
		"dead: job 2 (fail) after 3 attempts: attempt 3: retried by the consumer\n")
	n.expect("GET", "/actor/app/main/jobs/2", "", 404, "job 2: no result yet\n")

	n.expect("PUT", "/actor/app/main/kv/greeting", "hello", 200, "version 1\n")
	n.expect("GET", "/actor/app/main/kv/greeting", "", 200, "hello\n")
	n.expect("GET", "/actor/app/main/kv/nothing", "", 404, "no key nothing\n")

	n.expect("GET", "/actor/app/main/orders/order-42", "", 404, "no order order-42\n")
	n.expect("POST", "/actor/app/main/orders/order-42", "item=book", 200, "order order-42: running\n")
	n.until("GET", "/actor/app/main/orders/order-42", "", "order order-42: waiting, waiting for approved\n")
	// The approval answers the order's status, which is either, depending on
	// whether the order's next run got ahead of the status call.
	n.expectPrefix("POST", "/actor/app/main/orders/order-42/approve", 200, "order order-42: ")
	_, body := n.do("GET", "/actor/app/main/orders/order-42", "")
	for deadline := time.Now().Add(10 * time.Second); !strings.HasPrefix(body, "order order-42: completed, shipped: reservation "); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the order: %q", body)
		}
		_, body = n.do("GET", "/actor/app/main/orders/order-42", "")
	}
	n.expect("POST", "/actor/app/main/orders/order-42/approve", "", 409, "order order-42 is finished\n")

	for _, class := range []string{"kv", "queue", "worker", "orders"} {
		n.expect("GET", "/actor/"+class+"/x", "", 403, "class \""+class+"\" is internal: outside requests are refused\n")
	}
}
