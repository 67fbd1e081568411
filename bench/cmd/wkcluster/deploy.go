//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// deployApp is the app the deploy cluster's nodes serve (serve --app).
const deployApp = "bench/probe"

// deployedRE finds the seq a deploy made current in its output.
var deployedRE = regexp.MustCompile(`is current, seq (\d+)`)

// deploy runs `wasmkeep deploy` of version k of the probe into the
// cluster's bucket: the probe with configuration ROUND=k%2, so that each
// deploy differs from current and the two configurations alternate. The
// first (k 0) uploads the module too. It returns the seq made current.
func (c *config) deploy(bucketDir string, k int) (uint64, error) {
	conf := filepath.Join(c.tmp, fmt.Sprintf("probe-%d.config", k%2))
	if err := os.WriteFile(conf, fmt.Appendf(nil, "ROUND=%d\n", k%2), 0o600); err != nil {
		return 0, err
	}
	args := []string{"deploy", "--app", deployApp, "--bucket", "file://" + bucketDir, "--config", "probe=" + conf}
	if k == 0 {
		args = append(args, "--actor", "probe="+c.guest)
	}
	out, err := exec.Command(c.bin, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("wasmkeep %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	m := deployedRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wasmkeep deploy printed no new seq:\n%s", out)
	}
	return strconv.ParseUint(string(m[1]), 10, 64)
}

// seqRE is the seq a node serves on its metrics page.
var seqRE = regexp.MustCompile(`(?m)^wasmkeep_deploy_seq (\S+)$`)

// deploySeq reads the seq of the version n serves from its metrics page.
func (n *node) deploySeq() (uint64, error) {
	body, err := expect("GET", n.metrics+"/metrics", "")
	if err != nil {
		return 0, err
	}
	m := seqRE.FindStringSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("node %s: no wasmkeep_deploy_seq on its metrics page", n.id)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return uint64(v), err
}

// awaitSeq polls each node's metrics page until every one serves seq (or
// a later one), and returns how long after from the last one was seen.
func (cl *cluster) awaitSeq(seq uint64, from time.Time) (time.Duration, error) {
	for _, n := range cl.nodes {
		for {
			got, err := n.deploySeq()
			if err != nil {
				return 0, err
			}
			if got >= seq {
				break
			}
			if time.Since(from) > 2*time.Minute {
				return 0, fmt.Errorf("node %s still serves seq %d 2 minutes after seq %d was deployed%s", n.id, got, seq, n.LogTail())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(from), nil
}

// load is a steady load through every node while the deploys run: one
// client a node, each sending GET /echo to actors load-0 to load-2 in
// turn (each held by one node, so most requests are forwarded), one
// request every loadPause.
type load struct {
	stopping         atomic.Bool
	wg               sync.WaitGroup
	requests, failed atomic.Int64
	first            atomic.Pointer[string] // the first failure, for the report
}

const loadPause = 5 * time.Millisecond

// deployJitter bounds the pause before each deploy: longer than the
// nodes' follow period (their heartbeat period, 3.3 s at the defaults,
// 0.67 s under -short-lease).
func (c *config) deployJitter() time.Duration {
	if c.shortLease {
		return time.Second
	}
	return 4 * time.Second
}

func startLoad(cl *cluster) *load {
	l := &load{}
	for _, n := range cl.nodes {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for k := 0; !l.stopping.Load(); k++ {
				url := fmt.Sprintf("%s/actor/probe/load-%d/echo", n.URL(), k%len(cl.nodes))
				a, err := do("GET", url)
				l.requests.Add(1)
				if err != nil || a.code != 200 {
					l.failed.Add(1)
					why := fmt.Sprintf("GET %s: %v %d %q", url, err, a.code, a.body)
					l.first.CompareAndSwap(nil, &why)
				}
				time.Sleep(loadPause)
			}
		}()
	}
	return l
}

// stop stops the load and returns its counts.
func (l *load) stop() (requests, failed int64, first string) {
	l.stopping.Store(true)
	l.wg.Wait()
	if p := l.first.Load(); p != nil {
		first = *p
	}
	return l.requests.Load(), l.failed.Load(), first
}

// rollouts deploys c.deploys new versions one after another under a steady
// load, and times each from the deploy command's return to every node
// serving it.
func (c *config) rollouts(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	fmt.Fprintf(stdout, "\n%d deploys, each until every node serves it, under a load through every node\n", c.deploys)
	l := startLoad(cl)
	var took []time.Duration
	for k := 1; k <= c.deploys; k++ {
		// Unpaced, the loop locks onto the nodes' follow period (each
		// deploy lands just after their read of current): start each at a
		// random moment of the period instead.
		time.Sleep(rand.N(c.deployJitter()))
		seq, err := c.deploy(cl.bucketDir, k)
		if err != nil {
			l.stop()
			return nil, err
		}
		d, err := cl.awaitSeq(seq, time.Now())
		if err != nil {
			l.stop()
			return nil, err
		}
		took = append(took, d)
		fmt.Fprintf(stdout, "deploy %2d: seq %d, every node serving it %.2f s after deploy returned\n", k, seq, d.Seconds())
	}
	requests, failed, first := l.stop()
	p50, p99 := measure.Percentile(took, 0.5), measure.Percentile(took, 0.99)
	fmt.Fprintf(stdout, "deploy to every node serving: p50 %.2f s, p99 %.2f s, max %.2f s; load: %d requests, %d failed\n",
		p50.Seconds(), p99.Seconds(), slices.Max(took).Seconds(), requests, failed)
	if first != "" {
		fmt.Fprintln(stdout, "first failed request:", first)
	}
	return []measure.Row{
		row("deploy_serving_p50", p50.Seconds(), "s"),
		row("deploy_serving_p99", p99.Seconds(), "s"),
		row("deploy_serving_max", slices.Max(took).Seconds(), "s"),
		row("deploy_count", float64(len(took)), "deploys"),
		row("deploy_load_requests", float64(requests), "requests"),
		row("deploy_load_failed", float64(failed), "requests"),
	}, nil
}
