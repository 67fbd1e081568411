package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
)

// delete-self removes the actor when the event ends; delete-self-durable
// inside the call. Either way the next event starts a fresh actor.
func TestDeleteSelf(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, node.Options{DataDir: dir, Classes: map[string]string{"probe": probe(t)}})
	db := filepath.Join(dir, "state", "default", "default", "actors", "default", "probe", "a.db")
	gone := func(what string) {
		t.Helper()
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("%s: the database is still there (%v)", what, err)
		}
	}

	n.expect("POST", "/actor/probe/a/exec", "CREATE TABLE kept (v)", 200, "ok 0")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "2")
	// Plain: the rest of the event still writes, and all of it goes at its end.
	n.expect("POST", "/actor/probe/a/delete", "", 200, "<nil>; <nil>")
	gone("after delete-self")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("POST", "/actor/probe/a/query", "SELECT count(*) FROM sqlite_master WHERE name IN ('kept', 'after_delete')", 200, "ok 0")
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "1")

	// Durable: refused inside a transaction, then storage is refused after it.
	n.expect("POST", "/actor/probe/a/delete?durable=1&tx=1", "", 200,
		"sql not-allowed: delete-self-durable inside a transaction: commit or roll back first; <nil>")
	n.expect("POST", "/actor/probe/a/delete?durable=1", "", 200, "<nil>; sql not-allowed: this actor was deleted in this event")
	gone("after delete-self-durable")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("GET", "/actor/probe/a/init-runs", "", 200, "1")
}

// Under the existing rule, a deleted actor is unknown again: outside
// requests cannot recreate it.
func TestDeletedActorOfAnExistingClassIsGone(t *testing.T) {
	opts := node.Options{DataDir: t.TempDir(), Classes: map[string]string{"probe": probe(t)}}
	n := startNode(t, opts)
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.stop()
	opts.Access = map[string]access.Access{"probe": mustAccess(t, "existing")}
	n = startNode(t, opts)
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("POST", "/actor/probe/a/delete?durable=1", "", 200, "<nil>; sql not-allowed: this actor was deleted in this event")
	if code, _ := n.do("GET", "/actor/probe/a/hits", ""); code != 404 {
		t.Errorf("a deleted actor of an existing class answered %d, want 404", code)
	}
}
