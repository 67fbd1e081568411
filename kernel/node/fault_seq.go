//go:build wasmkeep_faults

package node

import "sync/atomic"

// FaultSkipSeqCheck plants a bug for the version rule's test
// (cmd/wasmkeep/apply_fault_test.go), compiled only into a build with
// -tags wasmkeep_faults: set, an event runs on an actor whose data a newer
// version wrote (upToDate skips the seq check), which the test shows.
var FaultSkipSeqCheck atomic.Bool

func faultSkipSeqCheck() bool { return FaultSkipSeqCheck.Load() }
