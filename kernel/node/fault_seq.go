//go:build wasmkeep_faults

package node

import (
	"fmt"
	"os"
	"sync/atomic"
)

// FaultSkipSeqCheck plants a bug for the version rule's tests, compiled
// only into a build with -tags wasmkeep_faults: set, an event runs on an
// actor whose data a newer version wrote (upToDate skips the seq check),
// which the tests show. In-process tests set it
// (cmd/wasmkeep/apply_fault_test.go); a process has it set by
// WASMKEEPTEST_SKIP_SEQ_CHECK=1 (cmd/wasmkeep/deploy_mixed_test.go).
var FaultSkipSeqCheck atomic.Bool

// skipSeqCheckEnv names the variable (no WASMKEEP_ prefix: the
// configuration would refuse it as an unknown key).
const skipSeqCheckEnv = "WASMKEEPTEST_SKIP_SEQ_CHECK"

func init() {
	if os.Getenv(skipSeqCheckEnv) == "1" {
		fmt.Fprintf(os.Stderr, "FAULT %s=1: events run on data a newer version wrote\n", skipSeqCheckEnv)
		FaultSkipSeqCheck.Store(true)
	}
}

func faultSkipSeqCheck() bool { return FaultSkipSeqCheck.Load() }
