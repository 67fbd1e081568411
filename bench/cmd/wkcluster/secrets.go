//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// The secrets' rollout (issue 27's benchmark): on the deploy cluster,
// whose nodes hold the app's secrets key, -secrets `wasmkeep secrets set`s
// one after another, each a new value of one name; the time from each
// set's return to every node serving it to an actor (the probe's /env).

// secretsKey is the deploy cluster's secrets key file, made before its
// nodes start.
func (c *config) secretsKey() string { return filepath.Join(c.tmp, "secrets.key") }

func (c *config) newSecretsKey() error {
	if out, err := exec.Command(c.bin, "secrets", "new-key", "--out", c.secretsKey()).CombinedOutput(); err != nil {
		return fmt.Errorf("wasmkeep secrets new-key: %w\n%s", err, out)
	}
	return nil
}

// setSecret runs `wasmkeep secrets set` of the probe's TOKEN to value.
func (c *config) setSecret(bucketDir, value string) error {
	args := []string{"secrets", "set", "--app", deployApp, "--bucket", "file://" + bucketDir, "--key", c.secretsKey(), "--class", "probe", "TOKEN"}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdin = strings.NewReader(value)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("wasmkeep %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// awaitSecret polls an actor of each node (one it holds) until it reads
// value, and returns how long after from the last one did.
func (cl *cluster) awaitSecret(value string, from time.Time) (time.Duration, error) {
	for _, n := range cl.nodes {
		url := n.URL() + "/actor/probe/secrets-" + n.id + "/env?name=TOKEN"
		for {
			a, err := do("GET", url)
			if err != nil {
				return 0, err
			}
			if a.code == 200 && a.body == "set "+value {
				break
			}
			if time.Since(from) > 2*time.Minute {
				return 0, fmt.Errorf("node %s still answers %d %q 2 minutes after the set%s", n.id, a.code, a.body, n.LogTail())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(from), nil
}

// secretRollouts sets c.secrets values one after another and times each
// from the set's return to every node serving it.
func (c *config) secretRollouts(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	fmt.Fprintf(stdout, "\n%d secrets set, each until every node serves it\n", c.secrets)
	var took []time.Duration
	for k := 1; k <= c.secrets; k++ {
		time.Sleep(rand.N(c.followJitter())) // as the deploys: not locked onto the follow period
		value := fmt.Sprintf("value-%d", k)
		if err := c.setSecret(cl.bucketDir, value); err != nil {
			return nil, err
		}
		d, err := cl.awaitSecret(value, time.Now())
		if err != nil {
			return nil, err
		}
		took = append(took, d)
		fmt.Fprintf(stdout, "set %2d: every node serving it %.2f s after set returned\n", k, d.Seconds())
	}
	p50, p99 := measure.Percentile(took, 0.5), measure.Percentile(took, 0.99)
	fmt.Fprintf(stdout, "secrets set to every node serving: p50 %.2f s, p99 %.2f s, max %.2f s\n", p50.Seconds(), p99.Seconds(), slices.Max(took).Seconds())
	return []measure.Row{
		row("secrets_serving_p50", p50.Seconds(), "s"),
		row("secrets_serving_p99", p99.Seconds(), "s"),
		row("secrets_serving_max", slices.Max(took).Seconds(), "s"),
		row("secrets_count", float64(len(took)), "sets"),
	}, nil
}
