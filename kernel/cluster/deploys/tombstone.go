package deploys

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Deleting an app (book ADR 0028, section 5; ADR 1053): `wasmkeep app
// delete` writes the app's tombstone, apps/<t>/<a>/deleted, then removes
// every other object under the app's two roots (its versions and secrets,
// and its actors' state). The tombstone stays: a deploy, a rollback and a
// node's start refuse the app from then on.

// ErrAppDeleted refuses an app whose tombstone is in the bucket.
var ErrAppDeleted = errors.New("the app was deleted (wasmkeep app delete): its tombstone is in the bucket")

// TombstoneKey is app a's tombstone.
func TombstoneKey(a app.Name) string { return a.DeployRoot() + "deleted" }

// RefuseDeleted returns ErrAppDeleted, naming a, if a's tombstone is in b.
func RefuseDeleted(ctx context.Context, b bucket.Bucket, a app.Name) error {
	o, err := b.Get(ctx, TombstoneKey(a), bucket.GetOptions{})
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", TombstoneKey(a), err)
	}
	o.Body.Close()
	return fmt.Errorf("app %s: %w", a, ErrAppDeleted)
}

// AppExists reports whether anything of a is in the bucket: an object
// under its deploy root (a version, its secrets, its tombstone) or its
// state root (its actors).
func AppExists(ctx context.Context, b bucket.Bucket, a app.Name) (bool, error) {
	for _, root := range []string{a.DeployRoot(), a.StateRoot()} {
		page, err := b.List(ctx, root, bucket.ListOptions{Limit: 1})
		if err != nil {
			return false, fmt.Errorf("listing %s: %w", root, err)
		}
		if len(page.Entries) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// WriteTombstone creates a's tombstone holding body (who and when), once:
// one already there is kept, and created says so.
func WriteTombstone(ctx context.Context, b bucket.Bucket, a app.Name, body []byte) (created bool, err error) {
	_, err = b.Put(ctx, TombstoneKey(a), bytes.NewReader(body), int64(len(body)), bucket.Condition{IfAbsent: true})
	if errors.Is(err, bucket.ErrPrecondition) {
		return false, nil
	}
	return err == nil, err
}

// RemoveApp deletes every object under a's state root and deploy root but
// the tombstone, and returns how many it deleted; one gone meanwhile is
// not an error.
func RemoveApp(ctx context.Context, b bucket.Bucket, a app.Name) (int, error) {
	n := 0
	for _, root := range []string{a.StateRoot(), a.DeployRoot()} {
		entries, err := bucket.ListAll(ctx, b, root)
		if err != nil {
			return n, err
		}
		for _, e := range entries {
			if e.Key == TombstoneKey(a) {
				continue
			}
			if err := b.Delete(ctx, e.Key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
				return n, fmt.Errorf("deleting %s: %w", e.Key, err)
			}
			n++
		}
	}
	return n, nil
}
