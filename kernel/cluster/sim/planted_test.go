package sim

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
)

// caught runs seeds until one fails, at most budget of them, and says which.
func caught(t *testing.T, budget int, cfg func(seed uint64) Config) {
	t.Helper()
	for seed := range uint64(budget) {
		res := run(t, cfg(seed))
		if res.Failed() {
			t.Logf("caught at seed %d: %s\n  %s", seed, res.Violations[0], res)
			return
		}
	}
	t.Fatalf("not caught in %d seeds", budget)
}

// Planted bug 1: the lease's writes lose their condition (renewals and
// fences alike), as on a bucket wrapper dropping it.
func TestCatchesUnconditionalLeaseWrite(t *testing.T) {
	caught(t, 200, func(seed uint64) Config { return Config{Seed: seed, BlindLeaseWrites: true} })
}

// Planted bug 3: a wake writes the released record's generation again.
func TestCatchesWakeReusingGeneration(t *testing.T) {
	bugs.ReuseGeneration = true
	defer func() { bugs.ReuseGeneration = false }()
	caught(t, 200, func(seed uint64) Config { return Config{Seed: seed} })
}
