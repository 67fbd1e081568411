//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/bench/measure"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

// served is the node's app when none is configured: its actors' history
// is under its state root.
var served = app.Default

// shape is one way of leaving a history: as written (nothing collected) or
// after collection (--history-retention-secs 0).
type shape struct {
	key, prefix string   // the rows' word; the counters' names' prefix
	serveArgs   []string // of the node that writes them
}

var shapes = []shape{
	{"written", "w-", nil},
	{"collected", "c-", []string{"--history-retention-secs", "0"}},
}

// counted is what the bucket holds of one counter's history.
type counted struct {
	objects, replayed int
	snapshot          bool
	listing           time.Duration // median of listings from this process
}

// restore writes the histories on st, then times restores of them.
func (c *config) restore(stdout io.Writer, st *store) ([]measure.Row, error) {
	const prefix = "restore"
	b, err := st.open(prefix)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	counts := map[string]counted{}
	for _, sh := range shapes {
		if err := c.writeHistories(st, prefix, sh); err != nil {
			return nil, fmt.Errorf("writing the %s histories: %w", sh.key, err)
		}
		for _, n := range c.history {
			name := sh.prefix + strconv.Itoa(n)
			if counts[name], err = count(b, name); err != nil {
				return nil, err
			}
		}
	}
	// Each run: a node on an empty data directory, the first request to
	// each counter timed, in an order rotated run by run.
	names := []string{}
	for _, sh := range shapes {
		for _, n := range c.history {
			names = append(names, sh.prefix+strconv.Itoa(n))
		}
	}
	took := map[string][]time.Duration{}
	for r := range c.restoreRuns {
		dir, err := c.dataDir("restore-" + st.kind)
		if err != nil {
			return nil, err
		}
		n, err := start(c.server(st, prefix), dir)
		if err != nil {
			return nil, err
		}
		order := slices.Concat([]string{fmt.Sprintf("none-%d", r)}, names)
		k := r % len(order)
		order = slices.Concat(order[k:], order[:k])
		for _, name := range order {
			t0 := time.Now()
			v, err := n.get(name)
			d := time.Since(t0)
			if err != nil {
				n.Stop()
				return nil, n.fail(err)
			}
			if want := writesOf(name); v != want {
				n.Stop()
				return nil, n.fail(fmt.Errorf("%s restored as %d, want %d", name, v, want))
			}
			key := name
			if want := writesOf(name); want == 0 {
				key = "none"
			}
			took[key] = append(took[key], d)
		}
		if err := n.Stop(); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	// A read-only restore must leave the history as it found it.
	for _, name := range names {
		after, err := count(b, name)
		if err != nil {
			return nil, err
		}
		if after.objects != counts[name].objects {
			fmt.Fprintf(stdout, "note: %s held %d objects before the restores, %d after\n", name, counts[name].objects, after.objects)
		}
	}

	kind := st.kind
	fmt.Fprintf(stdout, "\nrestore against history length on %s: first request after the data directory was deleted, median of %d (min-max) in ms; listings from this process\n", kind, c.restoreRuns)
	fmt.Fprintf(stdout, "%8s | %8s %8s %22s %10s | %8s %8s %22s %10s\n", "writes",
		"objects", "replayed", "restore, as written", "listing", "objects", "replayed", "restore, collected", "listing")
	none := took["none"]
	fmt.Fprintf(stdout, "%8s | %8d %8d %22s %10s |\n", "none", 0, 0, spread(none), "")
	rows := []measure.Row{row("restore_none_"+kind, ms(measure.Percentile(none, 0.5)), "ms")}
	for _, n := range c.history {
		w, cl := "w-"+strconv.Itoa(n), "c-"+strconv.Itoa(n)
		fmt.Fprintf(stdout, "%8d | %8d %8s %22s %8.1fµs | %8d %8s %22s %8.1fµs\n", n,
			counts[w].objects, replayed(counts[w]), spread(took[w]), measure.Us(counts[w].listing),
			counts[cl].objects, replayed(counts[cl]), spread(took[cl]), measure.Us(counts[cl].listing))
		for _, sh := range shapes {
			name := sh.prefix + strconv.Itoa(n)
			ct := counts[name]
			rows = append(rows,
				row(fmt.Sprintf("restore_%s_%d_%s", sh.key, n, kind), ms(measure.Percentile(took[name], 0.5)), "ms"),
				row(fmt.Sprintf("objects_%s_%d_%s", sh.key, n, kind), float64(ct.objects), "objects"),
				row(fmt.Sprintf("replayed_%s_%d_%s", sh.key, n, kind), float64(ct.replayed), "segments"),
				row(fmt.Sprintf("listing_%s_%d_%s", sh.key, n, kind), measure.Us(ct.listing), "µs"))
		}
	}
	lo, hi := slices.Min(c.history), slices.Max(c.history)
	if lo != hi {
		a, z := measure.Percentile(took["c-"+strconv.Itoa(lo)], 0.5), measure.Percentile(took["c-"+strconv.Itoa(hi)], 0.5)
		x := float64(z) / float64(a)
		verdict := "met"
		if x > 2 {
			verdict = "missed"
		}
		fmt.Fprintf(stdout, "target: a restore after collection flat in history length (%d writes within 2x of %d) on %s: %.2fx, %s\n", hi, lo, kind, x, verdict)
		rows = append(rows, row(fmt.Sprintf("restore_collected_ratio_%d_to_%d_%s", hi, lo, kind), x, "x"))
	}
	return rows, nil
}

// writesOf is how many writes the counter called name was given: the
// number after its prefix (none-R: none).
func writesOf(name string) int64 {
	for _, sh := range shapes {
		if s, ok := strings.CutPrefix(name, sh.prefix); ok {
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
	}
	return 0
}

// writeHistories gives each counter of sh its writes (plain POSTs, one
// segment each), the counters in parallel, on a node of its own; after
// collection, it waits until no counter's prefix shrinks any more before
// the clean stop, so that collection passes running are not cut short.
func (c *config) writeHistories(st *store, prefix string, sh shape) error {
	dir, err := c.dataDir("history-" + sh.key)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(dir))
	n, err := start(c.server(st, prefix, sh.serveArgs...), dir)
	if err != nil {
		return err
	}
	defer n.Stop()
	var wg sync.WaitGroup
	errs := make([]error, len(c.history))
	for i, w := range c.history {
		wg.Go(func() {
			name := sh.prefix + strconv.Itoa(w)
			for j := 1; j <= w; j++ {
				v, err := n.post(name)
				if err == nil && v != int64(j) {
					err = fmt.Errorf("POST to %s answered %d, want %d", name, v, j)
				}
				if err != nil {
					errs[i] = n.fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if sh.serveArgs == nil {
		return n.Stop()
	}
	b, err := st.open(prefix)
	if err != nil {
		return err
	}
	defer b.Close()
	last := -1
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		total := 0
		for _, w := range c.history {
			ct, err := count(b, sh.prefix+strconv.Itoa(w))
			if err != nil {
				return err
			}
			total += ct.objects
		}
		if total == last {
			return n.Stop()
		}
		last = total
	}
	return errors.New("collection did not settle within 2 minutes")
}

// count lists the counter's prefix (five times, for the listing's median)
// and plans its restore as the node would.
func count(b bucket.Bucket, name string) (counted, error) {
	b = bucket.Under(b, served.StateRoot())
	prefix, err := history.Prefix(history.Actor{Tenant: served.Tenant, Class: "counter", Name: name})
	if err != nil {
		return counted{}, err
	}
	var entries []bucket.Entry
	var ds []time.Duration
	for range 5 {
		t0 := time.Now()
		entries, err = bucket.ListAll(context.Background(), b, prefix)
		ds = append(ds, time.Since(t0))
		if err != nil {
			return counted{}, err
		}
	}
	l, err := history.ParseListing(prefix, entries)
	if err != nil {
		return counted{}, err
	}
	p, err := history.PlanRestore(l)
	if err != nil {
		return counted{}, fmt.Errorf("%s: %w", name, err)
	}
	return counted{objects: len(entries), replayed: len(p.Segments), snapshot: p.Snapshot != nil, listing: measure.Percentile(ds, 0.5)}, nil
}

// replayed is a plan's segments, and whether it starts from a snapshot.
func replayed(c counted) string {
	if c.snapshot {
		return strconv.Itoa(c.replayed)
	}
	return strconv.Itoa(c.replayed) + "*"
}

// spread is a median and its min-max, in ms.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", ms(measure.Percentile(ds, 0.5)), ms(slices.Min(ds)), ms(slices.Max(ds)))
}
