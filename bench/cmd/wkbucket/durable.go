//go:build linux

package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
)

// durable measures exec-durable writes on every store of -stores, round by
// round (the order rotated each round), and returns their rows and the
// engine the servers named.
func (c *config) durable(stdout io.Writer, open map[string]*store) ([]measure.Row, string, error) {
	all := map[string][]time.Duration{}
	rounds := map[string][]time.Duration{} // each round's p50
	var engine string
	for r := range c.rounds {
		for i := range c.stores {
			kind := c.stores[(i+r)%len(c.stores)]
			lat, eng, err := c.durableRound(open[kind], r)
			if err != nil {
				return nil, "", fmt.Errorf("durable writes on %s, round %d: %w", kind, r+1, err)
			}
			engine = eng
			all[kind] = append(all[kind], lat...)
			rounds[kind] = append(rounds[kind], measure.Percentile(lat, 0.5))
		}
	}
	base := c.stores[0]
	bp50, bp99 := measure.Percentile(all[base], 0.5), measure.Percentile(all[base], 0.99)
	fmt.Fprintf(stdout, "\ndurable write (exec-durable), %d writes per store over %d rounds, one at a time over %d actors; ratios to %s\n",
		c.writes*c.rounds, c.rounds, c.actors, base)
	fmt.Fprintf(stdout, "%-8s %9s %9s %9s %9s   %s\n", "store", "p50 ms", "p99 ms", "p50 x", "p99 x", "p50 ms by round")
	var rows []measure.Row
	for _, kind := range c.stores {
		p50, p99 := measure.Percentile(all[kind], 0.5), measure.Percentile(all[kind], 0.99)
		byRound := ""
		for _, d := range rounds[kind] {
			byRound += fmt.Sprintf(" %.2f", ms(d))
		}
		fmt.Fprintf(stdout, "%-8s %9.2f %9.2f %9.2f %9.2f  %s\n", kind, ms(p50), ms(p99), float64(p50)/float64(bp50), float64(p99)/float64(bp99), byRound)
		rows = append(rows,
			row("durable_write_p50_"+kind, ms(p50), "ms"),
			row("durable_write_p99_"+kind, ms(p99), "ms"))
		if kind != base {
			rows = append(rows,
				row("durable_write_p50_ratio_"+kind+"_to_"+base, float64(p50)/float64(bp50), "x"),
				row("durable_write_p99_ratio_"+kind+"_to_"+base, float64(p99)/float64(bp99), "x"))
		}
		for r, d := range rounds[kind] {
			rows = append(rows, row(fmt.Sprintf("durable_write_p50_%s_round%d", kind, r+1), ms(d), "ms"))
		}
	}
	if i := slices.Index(c.stores, "fs"); i >= 0 && base == "local" {
		x := float64(measure.Percentile(all["fs"], 0.5)) / float64(bp50)
		verdict := "met"
		if x > 2 {
			verdict = "missed"
		}
		fmt.Fprintf(stdout, "target: a durable write on bucket-fs within 2x of a local exec-durable (p50): %.2fx, %s\n", x, verdict)
	}
	return rows, engine, nil
}

// durableRound is one store's writes in one round, on a server and data
// directory (and bucket prefix) of their own.
func (c *config) durableRound(st *store, round int) ([]time.Duration, string, error) {
	dir, err := c.dataDir("durable-" + st.kind)
	if err != nil {
		return nil, "", err
	}
	srv := c.server(st, fmt.Sprintf("durable-%d", round))
	n, err := start(srv, dir)
	if err != nil {
		return nil, "", err
	}
	defer n.Stop()
	engine, err := srv.Engine(n.logPath)
	if err != nil {
		return nil, "", err
	}
	values := make([]int64, c.actors)
	write := func(i int) (time.Duration, error) {
		name := fmt.Sprintf("d-%d", i%c.actors)
		t0 := time.Now()
		v, err := n.durableWrite(name)
		took := time.Since(t0)
		if err != nil {
			return 0, n.fail(err)
		}
		if values[i%c.actors]++; v != values[i%c.actors] {
			return 0, n.fail(fmt.Errorf("durable write to %s answered %d, want %d", name, v, values[i%c.actors]))
		}
		return took, nil
	}
	// Resident, each with a write behind it, before timing.
	for i := range 2 * c.actors {
		if _, err := write(i); err != nil {
			return nil, "", err
		}
	}
	lat := make([]time.Duration, c.writes)
	for i := range lat {
		if lat[i], err = write(i); err != nil {
			return nil, "", err
		}
	}
	return lat, engine, nil
}
