package sim

import (
	"os"
	"strings"
	"testing"
	"time"
)

// alarmRun is a run of the alarm index's workload: shorter than the
// protocols' runs, so 200 seeds stay within the package's time.
func alarmRun(seed uint64) Config {
	return Config{Seed: seed, Alarms: true, Duration: 90 * time.Second}
}

// The alarm index under owners in turns on node leases (book ADR 0009's
// madsim_alarm_index): every state the bucket's history holds names an
// existing entry for its pending alarm, throughout.
func TestAlarmIndex(t *testing.T) {
	start := time.Now()
	var total Result
	for _, seed := range seeds() {
		cfg := alarmRun(seed)
		if *seedFlag >= 0 && testing.Verbose() {
			cfg.Trace = os.Stdout
		}
		res := run(t, cfg)
		if *seedFlag >= 0 {
			t.Logf("seed %d: %s", seed, res)
		}
		if res.Failed() {
			t.Errorf("seed %d: %s\n  %s\nrerun it: go test ./kernel/cluster/sim -run 'TestAlarmIndex$' -seed %d -v", seed, res, strings.Join(res.Violations, "\n  "), seed)
		}
		total.Holds += res.Holds
		total.Events += res.Events
		total.LateUploads += res.LateUploads
		total.LateWrites += res.LateWrites
		total.Crashes += res.Crashes
		total.Cuts += res.Cuts
		total.Zombies += res.Zombies
		total.Listed += res.Listed
		total.Replaced += res.Replaced
		total.StaleRemoved += res.StaleRemoved
		total.OwnerFences += res.OwnerFences
		total.HadNothing += res.HadNothing
		total.FirstListings += res.FirstListings
		total.Aimed += res.Aimed
		total.AlarmChecks += res.AlarmChecks
	}
	t.Logf("%d seeds in %v: %d holds, %d events, %d late uploads, %d late writes, %d crashes, %d cuts, %d zombies; alarms: %d listed, %d replaced removed, %d stale removed, %d owner fences, %d refused as the bucket had nothing, %d listed on joining, %d aimed faults, %d checks",
		len(seeds()), time.Since(start).Round(time.Millisecond), total.Holds, total.Events, total.LateUploads, total.LateWrites, total.Crashes, total.Cuts, total.Zombies,
		total.Listed, total.Replaced, total.StaleRemoved, total.OwnerFences, total.HadNothing, total.FirstListings, total.Aimed, total.AlarmChecks)
	if len(seeds()) >= 20 && (total.StaleRemoved == 0 || total.OwnerFences == 0 || total.HadNothing == 0 || total.FirstListings == 0 || total.Aimed == 0 || total.LateWrites == 0) {
		t.Errorf("no stale removal, owner fence, refusal as the bucket had nothing, listing on joining, aimed fault or late write in %d seeds: the faults did not reach what the rules guard", len(seeds()))
	}
}
