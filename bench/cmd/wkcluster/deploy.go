//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	out, err := c.wasmkeep("", args...)
	if err != nil {
		return 0, err
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

// awaitEach polls every node, side by side, every 10 ms until serves
// says it serves what changed at from, and returns how long after from
// each one did, in cl.nodes' order. An error from serves, or a node that
// still does not serve it 2 minutes on, ends every node's wait.
func (cl *cluster) awaitEach(from time.Time, what string, serves func(*node) (bool, error)) ([]time.Duration, error) {
	took := make([]time.Duration, len(cl.nodes))
	errs := make([]error, len(cl.nodes))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i, n := range cl.nodes {
		wg.Go(func() {
			for !failed.Load() {
				ok, err := serves(n)
				if err == nil && !ok && time.Since(from) > 2*time.Minute {
					err = fmt.Errorf("node %s does not serve %s 2 minutes after it changed%s", n.id, what, n.LogTail())
				}
				if err != nil {
					errs[i] = err
					failed.Store(true)
					return
				}
				if ok {
					took[i] = time.Since(from)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return took, errors.Join(errs...)
}

// tally counts requests and those that failed, keeping the first failure
// for the report; safe for concurrent use.
type tally struct {
	requests, failed atomic.Int64
	first            atomic.Pointer[string]
}

// add counts a request, failed if failure is not "".
func (t *tally) add(failure string) {
	t.requests.Add(1)
	if failure != "" {
		t.failed.Add(1)
		t.first.CompareAndSwap(nil, &failure)
	}
}

// counts returns the requests, the failed ones and the first failure.
func (t *tally) counts() (requests, failed int64, first string) {
	if p := t.first.Load(); p != nil {
		first = *p
	}
	return t.requests.Load(), t.failed.Load(), first
}

// load is a steady load through every node while the deploys run: one
// client a node, each sending GET /echo to actors load-0 to load-2 in
// turn (each held by one node, so most requests are forwarded), one
// request every loadPause.
type load struct {
	stopping atomic.Bool
	wg       sync.WaitGroup
	tally
}

const loadPause = 5 * time.Millisecond

// followJitter bounds the pause before each deploy or secrets change:
// longer than the period of the nodes' followers of both (their heartbeat
// period, 3 s at the defaults, 0.67 s under -short-lease).
func (c *config) followJitter() time.Duration {
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
				l.add(failure(url, a, err))
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
	return l.counts()
}

// failure describes a GET of url that did not answer 200, "" for one that did.
func failure(url string, a answer, err error) string {
	if err == nil && a.code == 200 {
		return ""
	}
	return fmt.Sprintf("GET %s: %v %d %q", url, err, a.code, a.body)
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
		time.Sleep(rand.N(c.followJitter()))
		seq, err := c.deploy(cl.bucketDir, k)
		if err != nil {
			l.stop()
			return nil, err
		}
		each, err := cl.awaitEach(time.Now(), fmt.Sprintf("seq %d", seq), func(n *node) (bool, error) {
			got, err := n.deploySeq()
			return got >= seq, err
		})
		if err != nil {
			l.stop()
			return nil, err
		}
		d := slices.Max(each)
		took = append(took, d)
		fmt.Fprintf(stdout, "deploy %2d: seq %d, every node serving it %.2f s after deploy returned\n", k, seq, d.Seconds())
	}
	requests, failed, first := l.stop()
	rows := spread("deploy_serving", took)
	fmt.Fprintf(stdout, "deploy to every node serving: p50 %.2f s, p99 %.2f s, max %.2f s; load: %d requests, %d failed\n",
		rows[0].Value, rows[1].Value, rows[2].Value, requests, failed)
	if first != "" {
		fmt.Fprintln(stdout, "first failed request:", first)
	}
	return append(rows,
		row("deploy_count", float64(len(took)), "deploys"),
		row("deploy_load_requests", float64(requests), "requests"),
		row("deploy_load_failed", float64(failed), "requests"),
	), nil
}

// appRows are the deploy cluster's rows: the rollouts, then the secrets
// changes, each unless its count is 0.
func (c *config) appRows(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	var rows []measure.Row
	if c.deploys > 0 {
		r, err := c.rollouts(stdout, cl)
		if err != nil {
			return nil, err
		}
		rows = r
	}
	if c.secrets > 0 {
		r, err := c.secretChanges(stdout, cl)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}
