//go:build wasip1

// A queue class with short timings for the tests: visibility 300 ms, three
// attempts, backoff 250 ms doubling to 1 s. queue/push.<class> pushes to
// <class>/consumer in batches of 2; other names are pull-only.
// queue/private.<name> answers only actors named "allowed".
package main

import (
	"strings"

	"github.com/wasmkeep/wasmkeep/sdk/go/queue"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	queue.Serve(func() queue.Config {
		c := queue.Config{BatchSize: 2, VisibilityMs: 300, MaxAttempts: 3, BackoffMs: 250, MaxBackoffMs: 1_000}
		if class, ok := strings.CutPrefix(wasmkeep.Self().Name, "push."); ok {
			return c.Consumer(class + "/consumer")
		}
		if strings.HasPrefix(wasmkeep.Self().Name, "private.") {
			c.Allow = func(caller string) bool { return strings.HasSuffix(caller, "/allowed") }
		}
		return c
	})
}

func main() {}
