//go:build wasip1

// The jobs app's queue class, served as "queue": every queue/<name> is
// pull-only except queue/jobs, which pushes to worker/main. Three attempts
// and a short backoff (0.5 s doubling to 5 s), as in the book's release
// build.
package main

import (
	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/queue"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func init() {
	queue.Serve(func() queue.Config {
		c := queue.Config{MaxAttempts: 3, BackoffMs: 500, MaxBackoffMs: 5_000}
		if wasmkeep.Self().Name == "jobs" {
			return c.Consumer("worker/main")
		}
		return c
	})
}

func main() {}
