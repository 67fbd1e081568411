//go:build linux

package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// latencies are one cluster's latency samples.
type latencies struct {
	direct, forwarded     []time.Duration // GET /echo straight to the holder, and through another node
	callLocal, callRemote []time.Duration // /call of an actor on the same node, and from another node
	getsPerForward        float64         // the forwarding node's bucket GETs per request it forwarded
}

// probe is one request the latency rows time: it must answer 200 for
// holder, its body starting with prefix.
type probe struct {
	method, url, holder, prefix string
}

func (p probe) once() (time.Duration, error) {
	t0 := time.Now()
	body, err := expect(p.method, p.url, p.holder)
	took := time.Since(t0)
	if err == nil && !strings.HasPrefix(body, p.prefix) {
		err = fmt.Errorf("%s %s: %q, want %q first", p.method, p.url, body, p.prefix)
	}
	return took, err
}

// interleaved sends each probe warmup times, then samples times, in turn
// (a slow moment of the machine falls on all of them), one request at a
// time, and returns each one's latencies.
func interleaved(samples, warmup int, probes ...probe) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(probes))
	for i := range warmup + samples {
		for j, p := range probes {
			d, err := p.once()
			if err != nil {
				return nil, err
			}
			if i >= warmup {
				out[j] = append(out[j], d)
			}
		}
	}
	return out, nil
}

// latencies measures the cluster's forwarded GETs and calls: actor lat
// and the callee held by node a, a caller on a and one on b.
func (c *config) latencies(stdout io.Writer, cl *cluster) (latencies, error) {
	a, b := cl.nodes[0], cl.nodes[1]
	for _, p := range []probe{
		{"GET", a.URL() + "/actor/probe/lat/echo", a.id, "GET"},
		{"POST", a.URL() + "/actor/probe/callee/echo", a.id, "POST"},
		{"POST", a.URL() + "/actor/probe/caller-a/echo", a.id, "POST"},
		{"POST", b.URL() + "/actor/probe/caller-b/echo", b.id, "POST"},
	} {
		if _, err := p.once(); err != nil {
			return latencies{}, fmt.Errorf("placing the actors: %w", err)
		}
	}
	call := "/call?to=probe/callee&path=/echo"
	fmt.Fprintf(stdout, "%s: %d samples of each latency, interleaved, after %d each\n", cl.mode, c.samples, c.warmup)
	s, err := interleaved(c.samples, c.warmup,
		probe{"GET", a.URL() + "/actor/probe/lat/echo", a.id, "GET /echo"},
		probe{"GET", b.URL() + "/actor/probe/lat/echo", a.id, "GET /echo"},
		probe{"POST", a.URL() + "/actor/probe/caller-a" + call, a.id, "200 POST /echo"},
		probe{"POST", b.URL() + "/actor/probe/caller-b" + call, b.id, "200 POST /echo"},
	)
	if err != nil {
		return latencies{}, err
	}
	perForward, err := getsPerForward(b, probe{"GET", b.URL() + "/actor/probe/lat/echo", a.id, "GET /echo"}, c.samples)
	if err != nil {
		return latencies{}, err
	}
	return latencies{direct: s[0], forwarded: s[1], callLocal: s[2], callRemote: s[3], getsPerForward: perForward}, nil
}

// The series getsPerForward reads on a node's metrics page.
var (
	bucketGetsRE = regexp.MustCompile(`(?m)^wasmkeep_bucket_requests_total\{operation="get",status="[a-z_]+"\} (\S+)$`)
	forwardsRE   = regexp.MustCompile(`(?m)^wasmkeep_forwards_total\{kind="request"\} (\S+)$`)
)

// getsPerForward sends p, a request n forwards, times times, one at a
// time, and returns n's bucket GETs (every one: its heartbeat listing's
// lease reads too) per request it forwarded meanwhile, from its metrics
// page: the owner hints' measure (issue 26, item 6; goal under 0.1).
func getsPerForward(n *node, p probe, times int) (float64, error) {
	count := func() (gets, forwards float64, err error) {
		page, err := expect("GET", n.metrics+"/metrics", "")
		if err != nil {
			return 0, 0, err
		}
		for _, m := range bucketGetsRE.FindAllStringSubmatch(page, -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			gets += v
		}
		if m := forwardsRE.FindStringSubmatch(page); m != nil {
			forwards, _ = strconv.ParseFloat(m[1], 64)
		}
		return gets, forwards, nil
	}
	gets0, forwards0, err := count()
	if err != nil {
		return 0, err
	}
	for range times {
		if _, err := p.once(); err != nil {
			return 0, err
		}
	}
	gets1, forwards1, err := count()
	if err != nil {
		return 0, err
	}
	if forwards1 == forwards0 {
		return 0, fmt.Errorf("node %s forwarded none of %d requests", n.id, times)
	}
	return (gets1 - gets0) / (forwards1 - forwards0), nil
}

func us(d time.Duration) float64 { return measure.Us(d) }

// latencyRows prints the latency tables of both modes and returns their
// rows.
func latencyRows(stdout io.Writer, samples int, lat map[string]latencies) []measure.Row {
	p50 := func(ds []time.Duration) time.Duration { return measure.Percentile(ds, 0.5) }
	p99 := func(ds []time.Duration) time.Duration { return measure.Percentile(ds, 0.99) }
	var rows []measure.Row
	fmt.Fprintf(stdout, "\nGET /echo of one actor, one at a time, %d each (µs)\n", samples)
	fmt.Fprintf(stdout, "%-6s %12s %12s %14s %14s %12s %8s\n", "mode", "direct p50", "direct p99", "forwarded p50", "forwarded p99", "added p50", "x p50")
	added := map[string]time.Duration{}
	for _, mode := range []string{"tls", "plain"} {
		l := lat[mode]
		added[mode] = p50(l.forwarded) - p50(l.direct)
		ratio := float64(p50(l.forwarded)) / float64(p50(l.direct))
		fmt.Fprintf(stdout, "%-6s %12.1f %12.1f %14.1f %14.1f %12.1f %8.2f\n", mode,
			us(p50(l.direct)), us(p99(l.direct)), us(p50(l.forwarded)), us(p99(l.forwarded)), us(added[mode]), ratio)
		rows = append(rows,
			row("get_direct_p50_"+mode, us(p50(l.direct)), "us"),
			row("get_direct_p99_"+mode, us(p99(l.direct)), "us"),
			row("get_forwarded_p50_"+mode, us(p50(l.forwarded)), "us"),
			row("get_forwarded_p99_"+mode, us(p99(l.forwarded)), "us"),
			row("get_forward_added_p50_"+mode, us(added[mode]), "us"),
			row("get_forwarded_ratio_p50_"+mode, ratio, "x"))
	}
	fmt.Fprintf(stdout, "bucket GETs per forwarded request (the forwarding node's, %d forwarded):", samples)
	for _, mode := range []string{"tls", "plain"} {
		fmt.Fprintf(stdout, " %s %.3f", mode, lat[mode].getsPerForward)
		rows = append(rows, row("forward_bucket_gets_per_request_"+mode, lat[mode].getsPerForward, "gets"))
	}
	fmt.Fprintln(stdout)
	tls := added["tls"] - added["plain"]
	fmt.Fprintf(stdout, "what TLS adds to a forwarded GET (added p50, tls - plain): %.1f µs\n", us(tls))
	rows = append(rows, row("get_forward_tls_added_p50", us(tls), "us"))

	fmt.Fprintf(stdout, "\nactors.call of /echo, one at a time, %d each (µs, the caller's whole request)\n", samples)
	fmt.Fprintf(stdout, "%-6s %12s %12s %14s %14s %8s\n", "mode", "1 node p50", "1 node p99", "2 nodes p50", "2 nodes p99", "x p50")
	for _, mode := range []string{"tls", "plain"} {
		l := lat[mode]
		ratio := float64(p50(l.callRemote)) / float64(p50(l.callLocal))
		fmt.Fprintf(stdout, "%-6s %12.1f %12.1f %14.1f %14.1f %8.2f\n", mode,
			us(p50(l.callLocal)), us(p99(l.callLocal)), us(p50(l.callRemote)), us(p99(l.callRemote)), ratio)
		rows = append(rows,
			row("call_one_node_p50_"+mode, us(p50(l.callLocal)), "us"),
			row("call_one_node_p99_"+mode, us(p99(l.callLocal)), "us"),
			row("call_across_nodes_p50_"+mode, us(p50(l.callRemote)), "us"),
			row("call_across_nodes_p99_"+mode, us(p99(l.callRemote)), "us"),
			row("call_across_nodes_ratio_p50_"+mode, ratio, "x"))
	}
	return rows
}
