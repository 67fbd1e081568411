//go:build !wasmkeep_faults

package node

// The fault hooks of the test builds (fault_earlyack.go and fault_seq.go,
// built with -tags wasmkeep_faults only): none in any other build, and these
// stand-ins compile to nothing.

func faultAckEarly(*actor) bool { return false }

func faultHoldUpload(*actor) {}

func faultSkipSeqCheck() bool { return false }
