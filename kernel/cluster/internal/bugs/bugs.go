// Package bugs holds the named switches that plant a known bug in the
// cluster protocols' real code, so the deterministic simulation
// (kernel/cluster/sim) can show that it catches each one. Every switch is
// off in production: only the simulation's tests set one, never two at
// once, and each is read by one line of the code it breaks. Bugs that a
// bucket wrapper can plant (an unconditional lease write) are not here.
package bugs

// ReuseGeneration: a wake (an acquisition over a record naming nobody)
// writes the record's generation again instead of the next one, so two
// holds share a generation (book ADR 0020 section 3).
var ReuseGeneration bool

// CollectSnapshot: a collection pass deletes the snapshot it runs after
// along with everything below it, so the segments after it lose their
// base and the next restore finds the chain broken (book ADR 0012).
var CollectSnapshot bool

// SkipHoldCheck: an event of a held actor runs without the hold check
// (ownership.Owners.Check always passes), so a process whose hold ended
// (a lapse, a release) goes on running events on its old copy while
// another process holds the actor (issue 24, item 1).
var SkipHoldCheck bool

// UntaggedAlarmKeys: the alarm index writes one key per actor and time
// (generation 1, nonce 0), unconditionally, as before tags (book ADR
// 0009, R1): a delete sent for an earlier entry at that time, landing
// late, removes a newer one.
var UntaggedAlarmKeys bool

// SkipAlarmGenCheck: a stale cleanup removes entries of generations above
// its own (book ADR 0009, R3), which a newer owner wrote.
var SkipAlarmGenCheck bool

// SkipAlarmFence: a stale cleanup runs before the hold uploaded anything
// (book ADR 0009, R2's fence), so an earlier owner's upload landing late
// can name an entry it removed.
var SkipAlarmFence bool

// ClearWithoutHistory: a stale cleanup runs although the bucket had
// nothing for the actor (book ADR 0009, R2 and R4), so a joining node's
// first upload landing late can name an entry it removed.
var ClearWithoutHistory bool

// Reused is what Acquire takes off the next generation: 1 for a wake
// while ReuseGeneration is planted, else 0.
func Reused(wake bool) uint64 {
	if ReuseGeneration && wake {
		return 1
	}
	return 0
}

// Collects reports whether Collectable deletes the snapshot it runs
// after: only while CollectSnapshot is planted.
func Collects(isSnapshot bool) bool { return CollectSnapshot && isSnapshot }

// AdoptParked: a wake of a parked record takes the parked hold back
// without writing the record (ADR 1055 forbids it), so two holds share
// one generation and version.
var AdoptParked bool

// UnconditionalParkedRelease: the release of a parked record writes the
// record naming nobody without If-Match on the parked hold's version, so
// one landing late overwrites a later holder's record.
var UnconditionalParkedRelease bool

// UnconditionalSuccessorClear: a failed take's clearing of a move's
// successor (ADR 1070) drops its If-Match on the version it read, so one
// landing late names nobody over a later hold.
var UnconditionalSuccessorClear bool
