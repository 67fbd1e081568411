//go:build linux

package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// The secrets rows (issue 27's benchmark) run on the deploy cluster, its
// nodes started with --secrets-key: c.secrets `wasmkeep secrets set`s of
// one name of the probe class, each a new value, one after another. After
// each, every node's resident actor (secret-<id>, taken before the first
// change, so that the rows time the nodes' secrets follower, not an
// activation) is asked for the value (the probe's /env, env.get) every
// 10 ms until it answers the new one: the time from the command's return
// to each node's first answer with it, and to the last node's (the book:
// within a heartbeat period, 3 s at the defaults).

// secretName is the name the rows change, which the deployed
// configuration (it would come first) does not have.
const secretName = "BENCH_SECRET"

// secretValue is the value of secretName set by change k (0: before the
// nodes start).
func secretValue(k int) string { return "value-" + strconv.Itoa(k) }

// newSecrets makes the key of the deploy cluster in dir, and sets the
// first value before its nodes start (each must then open the set to
// start).
func (c *config) newSecrets(dir, bucketDir string) error {
	c.secretsKey = filepath.Join(dir, "secrets.key")
	if _, err := c.wasmkeep("", "secrets", "new-key", "--out", c.secretsKey); err != nil {
		return err
	}
	return c.setSecret(bucketDir, 0)
}

// setSecret runs `wasmkeep secrets set` of value k of secretName (on
// stdin, as an operator gives it).
func (c *config) setSecret(bucketDir string, k int) error {
	_, err := c.wasmkeep(secretValue(k)+"\n", "secrets", "set", "--app", deployApp, "--bucket", "file://"+bucketDir,
		"--key", c.secretsKey, "--class", "probe", secretName)
	return err
}

// secretURL reads secretName in node n's actor of the rows.
func (n *node) secretURL() string {
	return n.URL() + "/actor/probe/secret-" + n.id + "/env?name=" + secretName
}

// secretChanges sets c.secrets new values one after another and times
// each from the command's return to each node serving it.
func (c *config) secretChanges(stdout io.Writer, cl *cluster) ([]measure.Row, error) {
	fmt.Fprintf(stdout, "\n%d secrets changes, each until every node's actor reads the new value\n", c.secrets)
	for _, n := range cl.nodes {
		body, err := expect("GET", n.secretURL(), n.id)
		if err == nil && body != "set "+secretValue(0) {
			err = fmt.Errorf("node %s's actor reads %q, want the value set before the start", n.id, body)
		}
		if err != nil {
			return nil, fmt.Errorf("%w%s", err, n.LogTail())
		}
	}
	var polls tally
	perNode := make([][]time.Duration, len(cl.nodes))
	var every []time.Duration
	for k := 1; k <= c.secrets; k++ {
		time.Sleep(rand.N(c.followJitter())) // as the deploys: not locked onto the follower's period
		if err := c.setSecret(cl.bucketDir, k); err != nil {
			return nil, err
		}
		before, want := "set "+secretValue(k-1), "set "+secretValue(k)
		each, err := cl.awaitEach(time.Now(), "secrets change "+strconv.Itoa(k), func(n *node) (bool, error) {
			url := n.secretURL()
			a, err := do("GET", url)
			served, why, err := secretPoll(url, a, err, n.id, before, want)
			if err == nil {
				polls.add(why)
			}
			return served, err
		})
		if err != nil {
			return nil, err
		}
		progress := fmt.Sprintf("secrets %2d:", k)
		for i, d := range each {
			perNode[i] = append(perNode[i], d)
			progress += fmt.Sprintf(" %s %.2f s,", cl.nodes[i].id, d.Seconds())
		}
		every = append(every, slices.Max(each))
		fmt.Fprintf(stdout, "%s every node %.2f s after set returned\n", progress, slices.Max(each).Seconds())
	}
	requests, failed, first := polls.counts()
	// In milliseconds: the node the set's command reads through can serve
	// the change in under 50 ms, which a tenth of a second rounds to 0.
	fmt.Fprintf(stdout, "%-36s %6s  %6s  %6s\n", "secrets set returned to serving (ms)", "p50", "p99", "max")
	line := func(name string, s []measure.Row) []measure.Row {
		fmt.Fprintf(stdout, "  %-34s %6.0f  %6.0f  %6.0f\n", name, s[0].Value, s[1].Value, s[2].Value)
		return s
	}
	ms := func(metric string, took []time.Duration) []measure.Row {
		return spreadIn(metric, took, time.Millisecond, "ms")
	}
	var rows []measure.Row
	for i, n := range cl.nodes {
		rows = append(rows, line("node "+n.id, ms("secrets_serving_"+n.id, perNode[i]))...)
	}
	rows = append(rows, line("every node", ms("secrets_serving", every))...)
	fmt.Fprintf(stdout, "polls: %d, %d failed (not 200, or neither the value before nor the new one)\n", requests, failed)
	if first != "" {
		fmt.Fprintln(stdout, "first failed poll:", first)
	}
	return append(rows,
		row("secrets_count", float64(len(every)), "changes"),
		row("secrets_polls", float64(requests), "requests"),
		row("secrets_polls_failed", float64(failed), "requests"),
	), nil
}

// secretPoll judges a poll of url, holder's actor, while the value changes
// from before to want (each as the probe answers it): served once it reads
// want; a failure for the tally when it failed, did not answer 200, or
// read neither value; an error when another node answered for the actor.
func secretPoll(url string, a answer, err error, holder, before, want string) (served bool, why string, moved error) {
	why = failure(url, a, err)
	switch {
	case why != "":
		return false, why, nil
	case a.node != holder:
		return false, "", fmt.Errorf("GET %s answered for node %q: the actor moved, and the rows would time its activation", url, a.node)
	case a.body != before && a.body != want:
		return false, fmt.Sprintf("GET %s: %q, want %q or %q", url, a.body, before, want), nil
	}
	return a.body == want, "", nil
}
