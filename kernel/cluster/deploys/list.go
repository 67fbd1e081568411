package deploys

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Keep is how many versions before the current one collection always
// keeps: as many rollbacks as can be made in a row.
const Keep = 5

// Version is a version directory in the bucket.
type Version struct {
	ID       string
	Manifest Manifest
	Written  time.Time // when its manifest was written (the bucket's clock)
	Current  bool
	InLine   bool  // current or reached from it by previous links
	Err      error // its manifest is missing or unreadable
}

// line is current's version and those its previous links reach, newest
// first, up to the first whose manifest cannot be read (included, with
// its Err).
func line(ctx context.Context, b bucket.Bucket, k keys, cur Current) []Version {
	var out []Version
	seen := map[string]bool{}
	for v := cur.Version; v != "" && !seen[v]; {
		seen[v] = true
		m, written, err := readManifest(ctx, b, k, v)
		out = append(out, Version{ID: v, Manifest: m, Written: written, Current: v == cur.Version, InLine: true, Err: err})
		if err != nil {
			break
		}
		v = m.Previous
	}
	return out
}

// List returns current (zero if the app has none) and every version
// directory: current's line newest first, then the others by id.
func List(ctx context.Context, b bucket.Bucket, a app.Name) (Current, []Version, error) {
	k := keysOf(a)
	cur, _, found, err := readCurrent(ctx, b, k)
	if err != nil {
		return Current{}, nil, err
	}
	var out []Version
	if found {
		out = line(ctx, b, k, cur)
	}
	entries, err := bucket.ListAll(ctx, b, k.root)
	if err != nil {
		return cur, nil, err
	}
	others := map[string]bool{}
	for _, e := range entries {
		if v, ok := k.versionDir(e.Key); ok {
			others[v] = true
		}
	}
	for _, v := range out {
		delete(others, v.ID)
	}
	for _, v := range slices.Sorted(maps.Keys(others)) {
		m, written, err := readManifest(ctx, b, k, v)
		out = append(out, Version{ID: v, Manifest: m, Written: written, Err: err})
	}
	return cur, out, nil
}

// Collect deletes old versions of current's line (book ADR 0012 and 0013):
// never current nor the Keep before it, never one in serving (the versions
// nodes report they run), never one that stopped being current less than
// retention before now (by the bucket's time its successor's manifest was
// written). Oldest first; each version's manifest goes first, so a
// half-deleted directory is never loaded; current is read again before
// each version and the pass stops if it changed. Versions off the line (a
// deploy still writing, one a failed deploy left, one a rollback stepped
// back from) are never touched. It returns the versions deleted.
func Collect(ctx context.Context, b bucket.Bucket, a app.Name, retention time.Duration, now time.Time, serving map[string]bool) ([]string, error) {
	k := keysOf(a)
	cur, _, found, err := readCurrent(ctx, b, k)
	if err != nil || !found {
		return nil, err
	}
	ln := line(ctx, b, k, cur)
	var deleted []string
	for i := len(ln) - 1; i > Keep; i-- {
		v := ln[i]
		if v.Err != nil || serving[v.ID] || now.Sub(ln[i-1].Written) < retention {
			continue
		}
		again, _, found, err := readCurrent(ctx, b, k)
		if err != nil {
			return deleted, err
		}
		if !found || again != cur {
			return deleted, nil // a deploy or rollback landed: the line may have changed
		}
		if err := deleteVersion(ctx, b, k, v.ID); err != nil {
			return deleted, err
		}
		deleted = append(deleted, v.ID)
	}
	return deleted, nil
}

// deleteVersion deletes everything under a version's directory, its
// manifest first.
func deleteVersion(ctx context.Context, b bucket.Bucket, k keys, v string) error {
	del := func(key string) error {
		if err := b.Delete(ctx, key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return fmt.Errorf("deleting %s: %w", key, err)
		}
		return nil
	}
	if err := del(k.manifest(v)); err != nil {
		return err
	}
	entries, err := bucket.ListAll(ctx, b, k.dir(v))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := del(e.Key); err != nil {
			return err
		}
	}
	return nil
}
