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
	// The socket home's run is the base run with more in it: half as many
	// seeds by default keep the package's time near what it was.
	socketSeedsFlag = flag.Int("socket-seeds", 100, "how many seeds TestSocketHome runs")
	moveSeedsFlag   = flag.Int("move-seeds", 60, "how many seeds TestMoves runs")
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

func seeds() []uint64 { return seedsOf(*seedsFlag) }

// seedsOf is n seeds from -first, or the one -seed names.
func seedsOf(n int) []uint64 {
	if *seedFlag >= 0 {
		return []uint64{uint64(*seedFlag)}
	}
	s := make([]uint64, n)
	for i := range s {
		s[i] = uint64(*firstFlag + i)
	}
	return s
}

func TestSimulation(t *testing.T) {
	runWorkload(t, "TestSimulation", seeds(), func(seed uint64) Config { return Config{Seed: seed} },
		"no late write, late upload, fence, lost lease or collection: the faults did not reach what the invariants guard",
		func(r Result) bool {
			return r.LateWrites > 0 && r.LateUploads > 0 && r.Fences > 0 && r.Lost > 0 && r.Collected > 0
		})
}

// runWorkload runs the seeds of list with cfg (test names it in how to
// rerun one) and, over 20 seeds or more, fails unless their sum reached
// what the workload is for (missing says what not).
func runWorkload(t *testing.T, test string, list []uint64, cfg func(seed uint64) Config, missing string, reached func(Result) bool) {
	start := time.Now()
	total := runSeeds(t, test, list, cfg)
	t.Logf("%d seeds in %v: %s", len(list), time.Since(start).Round(time.Millisecond), total)
	if len(list) >= 20 && !reached(total) {
		t.Errorf("%s, in %d seeds", missing, len(list))
	}
}

// runSeeds runs cfg's run of every seed of list, failing each seed that
// broke an invariant with how to run it again (test names the test), and
// returns the counts summed over the seeds.
func runSeeds(t *testing.T, test string, list []uint64, cfg func(seed uint64) Config) Result {
	var total Result
	for _, seed := range list {
		c := cfg(seed)
		if *seedFlag >= 0 && testing.Verbose() {
			c.Trace = os.Stdout
		}
		res := run(t, c)
		if *seedFlag >= 0 {
			t.Logf("seed %d: %s", seed, res)
		}
		if res.Failed() {
			t.Errorf("seed %d: %s\n  %s\nrerun it: go test ./kernel/cluster/sim -run '%s$' -seed %d -v", seed, res, strings.Join(res.Violations, "\n  "), test, seed)
		}
		total.add(res)
	}
	return total
}

// add sums r's counts into x.
func (x *Result) add(r Result) {
	x.Steps += r.Steps
	x.Requests += r.Requests
	x.Holds += r.Holds
	x.Gens += r.Gens
	x.Events += r.Events
	x.Acked += r.Acked
	x.Restores += r.Restores
	x.Snapshots += r.Snapshots
	x.Collected += r.Collected
	x.LateUploads += r.LateUploads
	x.Fences += r.Fences
	x.LateWrites += r.LateWrites
	x.Lost += r.Lost
	x.Twins += r.Twins
	x.Crashes += r.Crashes
	x.Restarts += r.Restarts
	x.Cuts += r.Cuts
	x.Zombies += r.Zombies
	x.Ties += r.Ties
	x.Listed += r.Listed
	x.Replaced += r.Replaced
	x.StaleRemoved += r.StaleRemoved
	x.NewerKept += r.NewerKept
	x.OwnerFences += r.OwnerFences
	x.HadNothing += r.HadNothing
	x.FirstListings += r.FirstListings
	x.Aimed += r.Aimed
	x.Pauses += r.Pauses
	x.AlarmChecks += r.AlarmChecks
	x.Parks += r.Parks
	x.HomeWakes += r.HomeWakes
	x.Relays += r.Relays
	x.LastSocket += r.LastSocket
	x.Drained += r.Drained
	x.Successors += r.Successors
	x.Cleared += r.Cleared
	x.ToNext += r.ToNext
}

// A seed replays exactly: the same trace, line for line, and the same
// counts, run after run (a difference names the first line that differs).
func TestSameSeedSameTrace(t *testing.T) {
	sameTrace(t, 20, func(seed uint64) Config { return Config{Seed: seed} })
	sameTrace(t, 10, alarmRun)
	sameTrace(t, 10, socketRun)
	sameTrace(t, 10, moveRun)
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

// socketRun is a run with the socket home's workload (sockets.go).
func socketRun(seed uint64) Config { return Config{Seed: seed, SocketHome: true} }

// The socket home (ADR 1055): holds parked at hibernation with a socket
// open, woken at home through relays from the other nodes, released at the
// last socket, by drains, lapses and clean stops, under every fault.
func TestSocketHome(t *testing.T) {
	runWorkload(t, "TestSocketHome", seedsOf(*socketSeedsFlag), socketRun,
		"no park, wake at home, relay, release at the last socket or by a drain",
		func(r Result) bool {
			return r.Parks > 0 && r.HomeWakes > 0 && r.Relays > 0 && r.LastSocket > 0 && r.Drained > 0
		})
}

// moveRun is a run with the moves' workload (moves.go).
func moveRun(seed uint64) Config { return Config{Seed: seed, Moves: true} }

// Moves (ADR 1070): releases that name a successor, events relayed to
// it, successors cleared as a failed take clears them, under every fault.
func TestMoves(t *testing.T) {
	runWorkload(t, "TestMoves", seedsOf(*moveSeedsFlag), moveRun, "no release to a successor, clearing or relay to one",
		func(r Result) bool { return r.Successors > 0 && r.Cleared > 0 && r.ToNext > 0 })
}
