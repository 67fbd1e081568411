//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// The drain rows (issue 28's benchmark; the book's ADR 0014): node a
// takes c.drainIdle actors that then sit idle and c.drainBusy actors kept
// busy by a load through b and c (one durable write a request, each
// request a unique token), then `wasmkeep cluster drain a`; the time is
// from the command's return to a's heartbeat saying drained (read with
// `cluster status --json`, as an operator waits for it), which a reaches
// only once every actor it held is handed over. The load runs on past it
// a moment, then every busy actor's tokens are read back through b: each
// acknowledged write must be there (lost counts those that are not: it
// must be 0; the tests are what check it).

// drainEnv keeps every actor resident on a until the drain (no idle
// hibernation while 1,000 are taken, which takes tens of seconds here).
var drainEnv = []string{"WASMKEEP_NODE__IDLE_TIMEOUT=10m"}

// probeURL is probe actor name's path on n.
func probeURL(n *node, name, path string) string {
	return n.URL() + "/actor/probe/" + name + path
}

// takeOn has node n take probe actor name, asking again after a 503 (the
// node cannot hold it now: a lease write late on a loaded machine, seen
// once in the quick run's 2 s lease), at most five times.
func takeOn(n *node, name string) error {
	for try := 1; ; try++ {
		_, err := expect("GET", probeURL(n, name, "/echo"), n.id)
		if err == nil || try == 5 || !strings.Contains(err.Error(), ": 503 ") {
			return err
		}
		time.Sleep(time.Second)
	}
}

func (c *config) drainRows(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	a, b := cl.nodes[0], cl.nodes[1]
	var idle, busy []string
	for i := range c.drainIdle + c.drainBusy {
		name := "drain-" + strconv.Itoa(i)
		if i < c.drainIdle {
			idle = append(idle, name)
		} else {
			busy = append(busy, name)
		}
	}
	fmt.Fprintf(stdout, "\ndrain: node a holds %d idle and %d busy actors (a load through b and c), then `cluster drain a`\n", c.drainIdle, c.drainBusy)
	begin := time.Now()
	if err := forEach(append(slices.Clone(idle), busy...), 8, func(name string) error {
		return takeOn(a, name)
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "  a took %d actors in %.1f s\n", len(idle)+len(busy), time.Since(begin).Seconds())

	// The load: one worker per busy actor, each through b or c in turn.
	var stopping atomic.Bool
	var requests, failed, unavailable atomic.Int64
	acked := make(map[string][]string, len(busy)) // by actor, each written by its own worker
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range busy {
		wg.Go(func() {
			var mine []string
			defer func() {
				mu.Lock()
				acked[name] = mine
				mu.Unlock()
			}()
			for j := 0; !stopping.Load(); j++ {
				token := "t" + strconv.Itoa(j)
				url := probeURL(cl.nodes[1+j%2], name, "/token?t="+token)
				ans, err := do("GET", url)
				requests.Add(1)
				switch {
				case err == nil && ans.code == 200:
					mine = append(mine, token)
				case err == nil && ans.code == 503:
					unavailable.Add(1)
				default:
					failed.Add(1)
				}
				time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond)
			}
		})
	}
	time.Sleep(2 * time.Second) // the load under way before the drain
	if _, err := c.wasmkeep("", "cluster", "drain", "a", "--bucket", "file://"+cl.bucketDir); err != nil {
		stopping.Store(true)
		wg.Wait()
		return nil, err
	}
	asked := time.Now()
	var took time.Duration
	for {
		run, err := c.runOf(cl, "a")
		if err != nil {
			stopping.Store(true)
			wg.Wait()
			return nil, err
		}
		if run == "drained" {
			took = time.Since(asked)
			break
		}
		if time.Since(asked) > 5*time.Minute {
			stopping.Store(true)
			wg.Wait()
			return nil, fmt.Errorf("node a not drained 5 minutes after the drain (status says %q)%s", run, a.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopping.Store(true)
	wg.Wait()
	fmt.Fprintf(stdout, "  drained %.2f s after `cluster drain` returned\n", took.Seconds())

	var lost atomic.Int64
	if err := forEach(busy, 8, func(name string) error {
		ans, err := do("GET", probeURL(b, name, "/tokens"))
		if err != nil || ans.code != 200 {
			return fmt.Errorf("reading %s's tokens through b: %v %d %q", name, err, ans.code, ans.body)
		}
		if ans.node == a.id {
			return fmt.Errorf("%s still answered by a after it drained", name)
		}
		have := map[string]bool{}
		for _, t := range strings.Fields(ans.body) {
			have[t] = true
		}
		for _, t := range acked[name] {
			if !have[t] {
				lost.Add(1)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "  load: %d requests, %d answered 503 (retry), %d failed otherwise, %d acknowledged writes lost\n",
		requests.Load(), unavailable.Load(), failed.Load(), lost.Load())
	if _, err := c.wasmkeep("", "cluster", "undrain", "a", "--bucket", "file://"+cl.bucketDir); err != nil {
		return nil, err
	}
	return []measure.Row{
		row("drain_idle_actors", float64(c.drainIdle), "actors"),
		row("drain_busy_actors", float64(c.drainBusy), "actors"),
		row("drain_seconds", took.Seconds(), "s"),
		row("drain_load_requests", float64(requests.Load()), "requests"),
		row("drain_load_unavailable", float64(unavailable.Load()), "requests"),
		row("drain_load_failed", float64(failed.Load()), "requests"),
		row("drain_lost_writes", float64(lost.Load()), "writes"),
	}, nil
}

// runOf is node id's STATE as `cluster status --json` says it.
func (c *config) runOf(cl *cluster, id string) (string, error) {
	out, err := c.wasmkeep("", "cluster", "status", "--json", "--bucket", "file://"+cl.bucketDir)
	if err != nil {
		return "", err
	}
	var st struct {
		Nodes []struct {
			ID  string `json:"id"`
			Run string `json:"run"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("cluster status --json: %w\n%s", err, out)
	}
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.Run, nil
		}
	}
	return "", fmt.Errorf("cluster status names no node %s:\n%s", id, out)
}
