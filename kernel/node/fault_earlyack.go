//go:build wasmkeep_faults

package node

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// A fault for the kill test's control (cmd/wasmkeep/cluster_kill_test.go),
// compiled only into a build with -tags wasmkeep_faults and active only
// with WASMKEEPTEST_EARLY_ACK=<duration> set: exec-durable answers before
// the bucket acknowledged (its commit is shipped after the event's answer,
// as a plain exec's is), and that upload waits the duration first. An
// actor then always has an acknowledged write outside the bucket for that
// long after each answer: a node killed then loses it, by construction,
// not by a race. The test checks that the default build has none of this.

// earlyAckEnv names the variable (no WASMKEEP_ prefix: the configuration
// would refuse it as an unknown key).
const earlyAckEnv = "WASMKEEPTEST_EARLY_ACK"

var earlyAckHold = func() time.Duration {
	s, ok := os.LookupEnv(earlyAckEnv)
	if !ok {
		return -1
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a duration\n", earlyAckEnv, s)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "FAULT %s=%v: exec-durable answers before the bucket acknowledged\n", earlyAckEnv, d)
	return d
}()

// earlyAcked are the actors with an exec-durable answered early whose
// upload is still to come.
var earlyAcked sync.Map // *actor → struct{}

// faultAckEarly reports whether exec-durable skips its upload (shipDurable).
func faultAckEarly(a *actor) bool {
	if earlyAckHold < 0 {
		return false
	}
	earlyAcked.Store(a, struct{}{})
	return true
}

// faultHoldUpload delays the upload after an event's answer (afterAnswer)
// when the event answered an exec-durable early.
func faultHoldUpload(a *actor) {
	if _, ok := earlyAcked.LoadAndDelete(a); ok {
		time.Sleep(earlyAckHold)
	}
}
