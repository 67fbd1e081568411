package command

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deploys"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// A move in an app that was deleted is refused (exit 1), as actor delete
// is, and writes no request, even with --force. Fails with the
// tombstone's check removed.
func TestActorMoveRefusesADeletedApp(t *testing.T) {
	ctx := context.Background()
	b := buckettest.NewMemory(buckettest.Flaws{})
	shop := app.Name{Tenant: "acme", App: "shop"}
	if _, err := b.Put(ctx, deploys.TombstoneKey(shop), bytes.NewReader(nil), 0, bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := actorMove(ctx, &out, b, nodelease.DefaultSettings(), "acme/shop/cart/u1", "b", true)
	var ee *exitErr
	if !errors.As(err, &ee) || ee.code != exitNo || !errors.Is(err, deploys.ErrAppDeleted) {
		t.Errorf("a move in a deleted app: %v, want refused (exit %d) as deleted", err, exitNo)
	}
	if moves, err := cluster.ListMoves(ctx, bucket.Under(b, shop.StateRoot())); err != nil || len(moves) != 0 {
		t.Errorf("requests written for the deleted app: %+v %v, want none", moves, err)
	}
	if !strings.Contains(err.Error(), "acme/shop") {
		t.Errorf("the refusal %q does not name the app", err)
	}
}
