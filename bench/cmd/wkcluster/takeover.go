//go:build linux

package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// takeovers kills each node in turn, c.kills times, and times from each
// SIGKILL to the first write through another node to an actor the dead
// node held; the node restarts on its data directory after each.
func (c *config) takeovers(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	timings := "default"
	if c.shortLease {
		timings = "short (2 s ttl)"
	}
	fmt.Fprintf(stdout, "\ntakeover after SIGKILL, %s lease timings, %d kills\n", timings, c.kills)
	var took []time.Duration
	for k := range c.kills {
		dead := cl.nodes[k%3]
		others := []*node{cl.nodes[(k+1)%3], cl.nodes[(k+2)%3]}
		actor := "/actor/probe/takeover-" + strconv.Itoa(k)
		if _, err := expect("POST", dead.URL()+actor+"/token?t=before", dead.id); err != nil {
			return nil, fmt.Errorf("%w%s", err, dead.LogTail())
		}
		dead.Kill()
		killed := time.Now()
		var by answer
		for i := 0; ; i++ {
			a, err := do("POST", others[i%2].URL()+actor+"/token?t=after-"+strconv.Itoa(i))
			if err == nil && a.code == 200 {
				by = a
				break
			}
			if time.Since(killed) > 2*time.Minute {
				return nil, fmt.Errorf("kill %d: no write to the dead node's actor within 2 minutes, the last: %v %d %q%s",
					k+1, err, a.code, a.body, others[0].LogTail())
			}
			time.Sleep(50 * time.Millisecond)
		}
		d := time.Since(killed)
		took = append(took, d)
		if by.node == dead.id || by.node == "" {
			return nil, fmt.Errorf("kill %d: the write after the kill answered for node %q", k+1, by.node)
		}
		tokens, err := expect("GET", others[0].URL()+actor+"/tokens", by.node)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(strings.Fields(tokens), "before") {
			return nil, fmt.Errorf("kill %d: the write acknowledged before the kill is not there after the takeover: %q", k+1, tokens)
		}
		restart := time.Now()
		if err := dead.start(); err != nil {
			return nil, fmt.Errorf("restarting node %s: %w", dead.id, err)
		}
		fmt.Fprintf(stdout, "kill %2d: node %s; written through node %s after %.2f s; restarted, answering in %.2f s\n",
			k+1, dead.id, by.node, d.Seconds(), time.Since(restart).Seconds())
	}
	p50, p99 := measure.Percentile(took, 0.5), measure.Percentile(took, 0.99)
	fmt.Fprintf(stdout, "takeover: p50 %.2f s, p99 %.2f s, min %.2f s, max %.2f s\n", p50.Seconds(), p99.Seconds(), slices.Min(took).Seconds(), slices.Max(took).Seconds())
	return []measure.Row{
		row("takeover_p50", p50.Seconds(), "s"),
		row("takeover_p99", p99.Seconds(), "s"),
		row("takeover_min", slices.Min(took).Seconds(), "s"),
		row("takeover_max", slices.Max(took).Seconds(), "s"),
		row("takeover_kills", float64(len(took)), "kills"),
	}, nil
}
