//go:build wasip1

// Wfscript is the workflow tests' class: each instance runs the script its
// input holds, items separated by ";":
//
//	step NAME          a step that counts its runs (the driver's counter,
//	                   key INSTANCE-NAME) and returns NAME
//	flaky NAME N       a step whose first N attempts fail
//	try NAME N         flaky as a TryStep: its failure is caught
//	panicky NAME N     a step whose first N attempts panic
//	slow NAME MS       a step that counts, then takes MS milliseconds
//	event NAME         a step that returns NAME@N, N counting the instance's
//	                   alarm events (runs)
//	key NAME           a keyed step that returns its idempotency key
//	sleep NAME MS      Sleep
//	until NAME AT      SleepUntil (AT in ms since the Unix epoch)
//	wait NAME MS       WaitForEvent with a timeout
//	fail MSG           fails the workflow
//	trap               panics outside any step
//
// The output joins the steps' results and the events' payloads with ",".
// The class's configuration (--env) sets ATTEMPTS, BACKOFF_MS, RETENTION_MS
// and RUN_BUDGET_MS; SWAP=1 swaps the script's first two items, as a deploy
// that reorders steps would. It uses the runner's pieces rather than Serve,
// to read its configuration on each event.
package main

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
	"github.com/wasmkeep/wasmkeep/sdk/go/workflow"
)

// alarms counts the alarm events of this instance of the module.
var alarms int

func init() {
	wasmkeep.OnInit(workflow.Init)
	wasmkeep.OnAlarm(func() error {
		alarms++
		return workflow.Alarm(run, config())
	})
	wasmkeep.HandleFunc(func(w wasmkeep.ResponseWriter, r *wasmkeep.Request) { workflow.HandleRequest(config(), w, r) })
}

func setting(name string) int64 {
	v, _ := wasmkeep.Env(name)
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func config() workflow.Config {
	return workflow.Config{
		MaxAttempts: int(setting("ATTEMPTS")), BackoffMs: setting("BACKOFF_MS"),
		RetentionMs: setting("RETENTION_MS"), RunBudgetMs: setting("RUN_BUDGET_MS"),
	}
}

// count adds one to the driver's counter for this instance's key and
// returns the new count.
func count(key string) (int, error) {
	req, err := wasmkeep.NewRequest("POST", "/count?key="+wasmkeep.Self().Name+"-"+key, nil)
	if err != nil {
		return 0, err
	}
	resp, err := wasmkeep.Call("wfdriver/counter", req)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, errors.New("counter answered " + strconv.Itoa(resp.StatusCode))
	}
	return strconv.Atoi(strings.TrimSpace(string(resp.Body)))
}

func run(wf *workflow.Run, input []byte) ([]byte, error) {
	items := strings.Split(string(input), ";")
	if v, _ := wasmkeep.Env("SWAP"); v == "1" && len(items) > 1 {
		items[0], items[1] = items[1], items[0]
	}
	var out []string
	for _, item := range items {
		f := strings.Fields(item)
		if len(f) == 0 {
			continue
		}
		arg := func(i int) string {
			if i < len(f) {
				return f[i]
			}
			return ""
		}
		name := arg(1)
		n, _ := strconv.ParseInt(arg(2), 10, 64)
		switch f[0] {
		case "step", "slow":
			res, err := wf.Step(name, func() ([]byte, error) {
				if _, err := count(name); err != nil {
					return nil, err
				}
				time.Sleep(time.Duration(n) * time.Millisecond)
				return []byte(name), nil
			})
			if err != nil {
				return nil, err
			}
			out = append(out, string(res))
		case "flaky", "try", "panicky":
			step := wf.StepKeyed
			if f[0] == "try" {
				step = wf.TryStep
			}
			res, err := step(name, func(string) ([]byte, error) {
				c, err := count(name)
				if err != nil {
					return nil, err
				}
				if int64(c) <= n && f[0] == "panicky" {
					panic("attempt " + strconv.Itoa(c) + " panics")
				}
				if int64(c) <= n {
					return nil, errors.New("attempt " + strconv.Itoa(c) + " fails")
				}
				return []byte(name), nil
			})
			var se *workflow.StepError
			if errors.As(err, &se) {
				out = append(out, "caught "+se.Error())
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, string(res))
		case "event", "key":
			res, err := wf.StepKeyed(name, func(key string) ([]byte, error) {
				if f[0] == "key" {
					return []byte(key), nil
				}
				return []byte(name + "@" + strconv.Itoa(alarms)), nil
			})
			if err != nil {
				return nil, err
			}
			out = append(out, string(res))
		case "sleep":
			if err := wf.Sleep(name, n); err != nil {
				return nil, err
			}
		case "until":
			if err := wf.SleepUntil(name, n); err != nil {
				return nil, err
			}
		case "wait":
			payload, ok, err := wf.WaitForEvent(name, n)
			if err != nil {
				return nil, err
			}
			if !ok {
				payload = []byte(name + " timed out")
			}
			out = append(out, string(payload))
		case "fail":
			return nil, workflow.Fail(strings.Join(f[1:], " "))
		case "trap":
			panic("a trap outside any step")
		}
	}
	return []byte(strings.Join(out, ",")), nil
}

func main() {}
