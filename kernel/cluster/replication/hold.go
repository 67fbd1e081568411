package replication

import "github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"

// HoldValid is the acknowledgement rule's test for hold h: this process
// still owns the actor in that very hold (not a later one of another
// generation) and the node lease is valid, read on the clock when called.
func HoldValid(o *ownership.Owners, h ownership.Hold) Valid {
	return func() bool { return o.Holding(h) }
}
