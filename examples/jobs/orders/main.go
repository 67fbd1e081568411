//go:build wasip1

// Orders is the jobs app's workflow class (the book's order workflow): one
// instance per order id. It reserves the stock, waits a cool-off, waits for
// the event "approved", then charges. Serve it with --access orders=internal
// and start instances with workflow.New("orders").Start(id, input) from
// another actor. COOL_OFF_MS and APPROVAL_TIMEOUT_MS (--env) shorten the
// waits for a try.
package main

import (
	"strconv"

	_ "github.com/wasmkeep/wasmkeep/sdk/go/preinit"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
	"github.com/wasmkeep/wasmkeep/sdk/go/workflow"
)

func init() { workflow.Serve(order, workflow.Config{}) }

func order(wf *workflow.Run, input []byte) ([]byte, error) {
	// A stub for the stock service: a real step sends the key along, so a
	// retry does not reserve twice.
	reservation, err := wf.StepKeyed("reserve", func(key string) ([]byte, error) {
		return []byte("reservation " + key + " for " + string(input)), nil
	})
	if err != nil {
		return nil, err
	}
	if err := wf.Sleep("cool-off", setting("COOL_OFF_MS", 60_000)); err != nil {
		return nil, err
	}
	_, ok, err := wf.WaitForEvent("approved", setting("APPROVAL_TIMEOUT_MS", 86_400_000))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, workflow.Fail("not approved in time")
	}
	charge, err := wf.StepKeyed("charge", func(key string) ([]byte, error) {
		return []byte("charged " + key), nil
	})
	if err != nil {
		return nil, err
	}
	return []byte("shipped: " + string(reservation) + "; " + string(charge)), nil
}

// setting is a number from the class's configuration, or def. It is read at
// the first run of each wait and recorded with it, so changing it later does
// not change a running order's history.
func setting(name string, def int64) int64 {
	if v, ok := wasmkeep.Env(name); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func main() {}
