//go:build wasip1

// The replay benchmark's workflow class (bench/cmd/wkworkflow): an instance
// started with input N records N steps (each returning its index), then
// parks on a long sleep. Besides the runner's own routes it has three for
// the benchmark, reached from outside:
//
//	POST /setup?n=N   starts the instance with input N (the runner's start,
//	                  as a caller would send it)
//	POST /run         one run of the instance inside this request, as its
//	                  alarm would run it: it answers "STEPS parked" once
//	                  every step is recorded, "STEPS running" before
//	GET  /ping        200, leaving nothing behind
package main

import (
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
	"github.com/wasmkeep/wasmkeep/sdk/go/workflow"
)

var (
	cfg    = workflow.Config{}
	steps  int  // the steps the last run passed
	parked bool // whether it parked on the sleep
)

func fn(wf *workflow.Run, input []byte) ([]byte, error) {
	n, _ := strconv.Atoi(string(input))
	steps, parked = 0, false
	for i := range n {
		if _, err := wf.Step("s", func() ([]byte, error) { return []byte(strconv.Itoa(i)), nil }); err != nil {
			return nil, err
		}
		steps++
	}
	if err := wf.Sleep("park", 3_600_000); err != nil {
		parked = true
		return nil, err
	}
	return nil, nil
}

func init() {
	wasmkeep.OnInit(workflow.Init)
	wasmkeep.OnAlarm(func() error { return workflow.Alarm(fn, cfg) })
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) {
		switch r.URL.Path {
		case "/ping":
			wasmkeep.DeleteSelf()
		case "/setup":
			req := &wasmkeep.Request{Method: "POST", URL: r.URL, Header: wasmkeep.Header{}, Body: abi.AppendBytes(nil, []byte(r.URL.Query().Get("n")))}
			req.URL.Path = "/wasmkeep-workflow/v1/start"
			req.Header.Set("X-Wasmkeep-Caller", "default/wkworkflow/setup")
			workflow.HandleRequest(cfg, w, req)
		case "/run":
			steps, parked = 0, false
			if err := workflow.Alarm(fn, cfg); err != nil {
				wasmkeep.Error(w, err.Error(), 500)
				return
			}
			state := " running"
			if parked {
				state = " parked"
			}
			w.Write([]byte(strconv.Itoa(steps) + state + "\n"))
		default:
			workflow.HandleRequest(cfg, w, r)
		}
	})
}

func main() {}
