package cluster

import (
	"bytes"
	"context"
	"errors"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// A drain request (book ADR 0014; ADR 1051) is an empty object on the
// shared root, beside the node leases, since node ids are the cluster's:
// `wasmkeep cluster drain` writes it, `undrain` deletes it, and the node
// it names reads it once per lease period. It decides no ownership: the
// node only stops claiming actors while it is there.

// DrainPrefix is where the drain requests are.
const DrainPrefix = "control/drain/"

// DrainKey is the key of node id's drain request.
func DrainKey(id string) string { return DrainPrefix + id }

// DrainRequested reports whether node id's drain request is in b.
func DrainRequested(ctx context.Context, b bucket.Bucket, id string) (bool, error) {
	o, err := b.Get(ctx, DrainKey(id), bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	o.Body.Close()
	return true, nil
}

// RequestDrain writes node id's drain request (again, if it is there).
func RequestDrain(ctx context.Context, b bucket.Bucket, id string) error {
	if err := nodelease.CheckNodeID(id); err != nil {
		return err
	}
	_, err := b.Put(ctx, DrainKey(id), bytes.NewReader(nil), 0, bucket.Condition{})
	return err
}

// WithdrawDrain deletes node id's drain request; one that is not there is
// no error.
func WithdrawDrain(ctx context.Context, b bucket.Bucket, id string) error {
	if err := nodelease.CheckNodeID(id); err != nil {
		return err
	}
	err := b.Delete(ctx, DrainKey(id), bucket.Condition{})
	if errors.Is(err, bucket.ErrNotFound) {
		return nil
	}
	return err
}
