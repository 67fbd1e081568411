package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seedFlag  = flag.Int64("seed", -1, "run only this seed (with its trace under -v)")
	seedsFlag = flag.Int("seeds", 200, "how many seeds TestSimulation runs")
	firstFlag = flag.Int("first", 0, "the first seed TestSimulation runs")
)

// TestMain runs the simulation on one processor: goroutines woken in one
// step then run one after another rather than in parallel (what the replay
// needs least to leave to chance), and faster, with no hand-over between
// processors at every step.
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}

func run(t *testing.T, cfg Config) Result {
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	var res Result
	synctest.Test(t, func(t *testing.T) { res = Run(cfg) })
	return res
}

func seeds() []uint64 {
	if *seedFlag >= 0 {
		return []uint64{uint64(*seedFlag)}
	}
	s := make([]uint64, *seedsFlag)
	for i := range s {
		s[i] = uint64(*firstFlag + i)
	}
	return s
}

func TestSimulation(t *testing.T) {
	start := time.Now()
	var total Result
	for _, seed := range seeds() {
		cfg := Config{Seed: seed}
		if *seedFlag >= 0 && testing.Verbose() {
			cfg.Trace = os.Stdout
		}
		res := run(t, cfg)
		if *seedFlag >= 0 {
			t.Logf("seed %d: %s", seed, res)
		}
		if res.Failed() {
			t.Errorf("seed %d: %s\n  %s\nrerun it: go test ./kernel/cluster/sim -run 'TestSimulation$' -seed %d -v", seed, res, strings.Join(res.Violations, "\n  "), seed)
		}
		total.Steps += res.Steps
		total.Requests += res.Requests
		total.Holds += res.Holds
		total.Gens += res.Gens
		total.Events += res.Events
		total.LateUploads += res.LateUploads
		total.Collected += res.Collected
		total.Snapshots += res.Snapshots
		total.Restores += res.Restores
		total.Acked += res.Acked
		total.Fences += res.Fences
		total.LateWrites += res.LateWrites
		total.Lost += res.Lost
		total.Twins += res.Twins
		total.Crashes += res.Crashes
		total.Restarts += res.Restarts
		total.Cuts += res.Cuts
		total.Zombies += res.Zombies
		total.Ties += res.Ties
	}
	t.Logf("%d seeds in %v: %s", len(seeds()), time.Since(start).Round(time.Millisecond), total)
	if len(seeds()) >= 20 && (total.LateWrites == 0 || total.LateUploads == 0 || total.Fences == 0 || total.Lost == 0 || total.Collected == 0) {
		t.Errorf("no late write, late upload, fence, lost lease or collection in %d seeds: the faults did not reach what the invariants guard", len(seeds()))
	}
}

// A seed replays exactly: the same trace, line for line, and the same
// counts, run after run (a difference names the first line that differs).
func TestSameSeedSameTrace(t *testing.T) {
	sameTrace(t, 20, func(seed uint64) Config { return Config{Seed: seed} })
	sameTrace(t, 10, alarmRun)
}

func sameTrace(t *testing.T, n uint64, cfg func(seed uint64) Config) {
	for seed := range n {
		var ta, tb strings.Builder
		ca, cb := cfg(seed), cfg(seed)
		ca.Trace, cb.Trace = &ta, &tb
		a, b := run(t, ca), run(t, cb)
		if fmt.Sprint(a) == fmt.Sprint(b) && ta.String() == tb.String() {
			continue
		}
		la, lb := strings.Split(ta.String(), "\n"), strings.Split(tb.String(), "\n")
		i := 0
		for i < min(len(la), len(lb)) && la[i] == lb[i] {
			i++
		}
		t.Errorf("seed %d ran twice:\n  %s\n  %s\nfirst difference, line %d:\n  %s\n  %s", seed, a, b, i+1, at(la, i), at(lb, i))
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}
