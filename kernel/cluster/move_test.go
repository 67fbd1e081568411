package cluster

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// A move request names any actor in one key segment and reads back; keys
// no command wrote are left out; dropping one that is gone is no error.
func TestMoveRequests(t *testing.T) {
	ctx := context.Background()
	b := buckettest.NewMemory(buckettest.Flaws{})
	key, err := RequestMove(ctx, b, "room", "a/b c%", "node-b")
	if err != nil || key != "control/move/room/612f62206325/node-b" {
		t.Fatalf("RequestMove: %q %v", key, err)
	}
	if _, err := RequestMove(ctx, b, "room", "x", "bad/id"); err == nil {
		t.Error("a move to a bad node id was written")
	}
	for _, junk := range []string{"control/move/room/zz/node-b", "control/move/room/61", "control/move/room/61/node-b/x"} {
		b.Put(ctx, junk, bytes.NewReader(nil), 0, bucket.Condition{})
	}
	moves, err := ListMoves(ctx, b)
	if err != nil || len(moves) != 1 {
		t.Fatalf("ListMoves: %+v %v, want the one request", moves, err)
	}
	if m := moves[0]; m.Class != "room" || m.Name != "a/b c%" || m.Target != "node-b" || m.Key != key || m.Written.IsZero() {
		t.Errorf("ListMoves: %+v", m)
	}
	if err := DropMove(ctx, b, moves[0]); err != nil {
		t.Fatal(err)
	}
	if err := DropMove(ctx, b, moves[0]); err != nil {
		t.Errorf("dropping a request gone already: %v", err)
	}
	if moves, _ := ListMoves(ctx, b); len(moves) != 0 {
		t.Errorf("after DropMove: %+v", moves)
	}
}

// A request written again between a node's listing and its drop stays
// (the drop is at the version listed); a store that refuses a delete's
// condition still has its requests dropped. The first fails with the
// drop unconditional, the second without the unconditional retry.
func TestDropMoveAtTheVersionListed(t *testing.T) {
	ctx := context.Background()
	for name, flaws := range map[string]buckettest.Flaws{"conditional": {}, "refused": {RefuseDeleteIfVersion: true}} {
		t.Run(name, func(t *testing.T) {
			b := buckettest.NewMemory(flaws)
			if _, err := RequestMove(ctx, b, "room", "lobby", "node-b"); err != nil {
				t.Fatal(err)
			}
			listed, err := ListMoves(ctx, b)
			if err != nil || len(listed) != 1 {
				t.Fatalf("ListMoves: %+v %v", listed, err)
			}
			if name == "refused" {
				if err := DropMove(ctx, b, listed[0]); err != nil {
					t.Fatalf("DropMove on a store refusing its condition: %v", err)
				}
				if moves, _ := ListMoves(ctx, b); len(moves) != 0 {
					t.Errorf("after DropMove on a store refusing its condition: %+v, want none", moves)
				}
				return
			}
			if _, err := RequestMove(ctx, b, "room", "lobby", "node-b"); err != nil { // the operator again
				t.Fatal(err)
			}
			if err := DropMove(ctx, b, listed[0]); !errors.Is(err, bucket.ErrPrecondition) {
				t.Errorf("dropping a request written again since it was listed: %v, want ErrPrecondition", err)
			}
			if moves, _ := ListMoves(ctx, b); len(moves) != 1 {
				t.Errorf("the request written again: %+v, want it kept", moves)
			}
		})
	}
}
