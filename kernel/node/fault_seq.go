//go:build wasmkeep_faults

package node

import (
	"fmt"
	"os"
	"sync/atomic"
)

// FaultSkipSeqCheck plants a bug for the version rule's tests
// (cmd/wasmkeep/apply_fault_test.go in process, and the controls of
// cmd/wasmkeep/deploy_cluster_test.go and deploy_mixed_test.go in real
// processes, which set WASMKEEPTEST_SKIP_SEQ_CHECK=1), compiled only into a build with
// -tags wasmkeep_faults: set, an event runs on an actor whose data a newer
// version wrote (upToDate skips the seq check), which the tests show.
var FaultSkipSeqCheck atomic.Bool

// skipSeqCheckEnv names the variable (no WASMKEEP_ prefix: the
// configuration would refuse it as an unknown key).
const skipSeqCheckEnv = "WASMKEEPTEST_SKIP_SEQ_CHECK"

func init() {
	if os.Getenv(skipSeqCheckEnv) == "1" {
		fmt.Fprintf(os.Stderr, "FAULT %s=1: events run on actors whose data a newer version wrote\n", skipSeqCheckEnv)
		FaultSkipSeqCheck.Store(true)
	}
}

func faultSkipSeqCheck() bool { return FaultSkipSeqCheck.Load() }
