//go:build wasmkeep_faults

package main

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// The version rule's control, in a build with -tags wasmkeep_faults:
// without the seq check (node.FaultSkipSeqCheck), the node runs version 1
// on the actor version 2 migrated, which TestOldCodeRefusedOnNewerData
// shows it refuses.
func TestOldCodeRunsOnNewerDataWithoutTheCheck(t *testing.T) {
	dir := seqAheadDir(t)
	node.FaultSkipSeqCheck.Store(true)
	defer node.FaultSkipSeqCheck.Store(false)
	tn := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"s": schemaV1(t)}, VersionID: "aaaa", Seq: 1})
	tn.expect("GET", "/actor/s/a", "", 200, "version=1 inits=2,1 hits=1 greeting=")
}
