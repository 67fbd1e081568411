package sim

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
)

// caught runs seeds until one fails, at most budget of them, and says
// which; the first violation must be one of the kinds the bug makes.
func caught(t *testing.T, budget int, kinds []string, cfg func(seed uint64) Config) {
	t.Helper()
	for seed := range uint64(budget) {
		res := run(t, cfg(seed))
		if !res.Failed() {
			continue
		}
		asTheBugWould(t, seed, res, kinds)
		return
	}
	t.Fatalf("not caught in %d seeds", budget)
}

// asTheBugWould fails t unless res's first violation is one of kinds.
func asTheBugWould(t *testing.T, seed uint64, res Result, kinds []string) {
	t.Helper()
	v := res.Violations[0]
	t.Logf("caught at seed %d: %s\n  %s", seed, v, res)
	for _, k := range kinds {
		if strings.Contains(v, k) {
			return
		}
	}
	t.Fatalf("seed %d failed, but not as the bug would: %s", seed, v)
}

// Planted bug 1: the lease's writes lose their condition (renewals and
// fences alike), as on a bucket wrapper dropping it.
func TestCatchesUnconditionalLeaseWrite(t *testing.T) {
	caught(t, 200, []string{"owned by"}, func(seed uint64) Config { return Config{Seed: seed, BlindLeaseWrites: true} })
}

// Planted bug 3: a wake writes the released record's generation again.
func TestCatchesWakeReusingGeneration(t *testing.T) {
	bugs.ReuseGeneration = true
	defer func() { bugs.ReuseGeneration = false }()
	caught(t, 200, []string{"made two holds"}, func(seed uint64) Config { return Config{Seed: seed} })
}

// Planted bug 2: an upload is acknowledged without checking the hold when
// it returned (the acknowledgement rule's test given to Open always
// holds), so a write that landed after its hold ended, past the next
// owner's listing, counts as durable.
func TestCatchesAcknowledgedLateUpload(t *testing.T) {
	caught(t, 200, []string{"lacks write"}, func(seed uint64) Config { return Config{Seed: seed, AckLateUploads: true} })
}

// Planted bug 4: collection deletes the snapshot it runs after, which the
// next restore needs as its base.
func TestCatchesCollectionOfNeededHistory(t *testing.T) {
	bugs.CollectSnapshot = true
	defer func() { bugs.CollectSnapshot = false }()
	caught(t, 200, []string{"broken chain", "lacks write"}, func(seed uint64) Config { return Config{Seed: seed} })
}

// Planted bug 5: an event of a resident actor runs without the hold check
// (issue 24, item 1), so a process whose hold ended with a lapse of its
// lease goes on running the actor's events on its old copy after another
// process took it.
func TestCatchesEventWithoutHoldCheck(t *testing.T) {
	bugs.SkipHoldCheck = true
	defer func() { bugs.SkipHoldCheck = false }()
	caught(t, 200, []string{"ran an event"}, func(seed uint64) Config { return Config{Seed: seed} })
}

// Planted bug 6: a wake of a parked record takes the parked hold back
// without writing (ADR 1055 forbids it: every wake is an acquisition at a
// generation of its own).
func TestCatchesWakeAdoptingParkedHold(t *testing.T) {
	bugs.AdoptParked = true
	defer func() { bugs.AdoptParked = false }()
	caught(t, 200, []string{"took back its parked hold"}, socketRun)
}

// Planted bug 7: a parked record's release drops its If-Match on the
// parked hold's version, so one landing late names nobody over a later
// hold.
func TestCatchesUnconditionalParkedRelease(t *testing.T) {
	bugs.UnconditionalParkedRelease = true
	defer func() { bugs.UnconditionalParkedRelease = false }()
	caught(t, 400, []string{"owned by", "made two holds", "ran an event"}, socketRun)
}

// Planted bug 8: a failed take's clearing of a move's successor (ADR 1070)
// drops its If-Match, so one landing late names nobody over a later hold.
func TestCatchesUnconditionalSuccessorClear(t *testing.T) {
	bugs.UnconditionalSuccessorClear = true
	defer func() { bugs.UnconditionalSuccessorClear = false }()
	caught(t, 200, []string{"owned by", "made two holds", "ran an event"}, moveRun)
}
