package secrets

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Change is one change to an app's secrets, written as one new object.
type Change struct {
	// Seal is the key the new object is sealed with.
	Seal Key
	// Open are the keys that may open the current set (Seal is tried too).
	Open []Key
	// Reset writes a whole set without opening the current one, which may
	// be sealed under a lost key or unreadable.
	Reset bool
	// Apply changes the set, which is a copy of the current one (empty for
	// Reset or the first change). It runs again if the write loses a race,
	// on the newer set, so nothing another writer wrote is lost.
	Apply func(*Set) error
	// NodesHaveKey says every node holds Seal. A change sealed under
	// another key than the current set's, and every Reset over an existing
	// set, needs it: a node without Seal could not open the new set, and no
	// heartbeat says which keys a node holds.
	NodesHaveKey bool
}

// Result is what a change wrote.
type Result struct {
	From, To uint64 // current before and after; equal when nothing was written
	NoOp     bool   // the set and key were those of current already
	Retries  int    // races lost on the way
}

var (
	// ErrConflict: other writers kept winning the race for current.
	ErrConflict = errors.New("other changes kept replacing current meanwhile")
	// ErrNodesNeedKey: a change under a key the current set is not sealed
	// with, without NodesHaveKey.
	ErrNodesNeedKey = errors.New("the nodes may not hold the key")
)

// maxAttempts bounds the retries of a change that keeps losing races.
const maxAttempts = 8

// Write applies c as the next seq: it lists secrets/ and reads current,
// opens the current set (unless Reset), applies the change, creates the
// sealed object IfAbsent under one more than any seq listed or current
// (an object a writer left before moving current is skipped, never
// reused), then replaces current IfVersion the one read, or creates it
// IfAbsent the first time. A race lost at either write starts again.
func Write(ctx context.Context, b bucket.Bucket, p Place, c Change) (Result, error) {
	var res Result
	for ; res.Retries < maxAttempts; res.Retries++ {
		done, err := attempt(ctx, b, p, c, &res)
		if done || err != nil {
			return res, err
		}
	}
	return res, fmt.Errorf("%s: %w (%d tries): nothing was changed; retry", p.currentKey(), ErrConflict, maxAttempts)
}

// attempt is one try of Write; done is false when a race was lost.
func attempt(ctx context.Context, b bucket.Bucket, p Place, c Change, res *Result) (done bool, err error) {
	next, err := highestSeq(ctx, b, p)
	if err != nil {
		return false, err
	}
	seq, tok, found, err := readCurrent(ctx, b, p)
	switch {
	case errors.Is(err, ErrCorruptCurrent) && c.Reset:
	case err != nil:
		return false, err
	}
	next = max(next, seq) + 1
	res.From, res.To = seq, seq
	var cur Current
	if found && !c.Reset {
		if cur, err = readObject(ctx, b, p, append([]Key{c.Seal}, c.Open...), seq); err != nil {
			return false, err
		}
	}
	if found && !c.NodesHaveKey && (c.Reset || cur.KeyID != c.Seal.ID()) {
		what := fmt.Sprintf("the current set is sealed under key %s", cur.KeyID)
		if c.Reset {
			what = "a reset replaces the current set"
		}
		return false, fmt.Errorf("%s and this change is sealed under key %s: %w; give every node that key first (a second --secrets-key), then say so with --nodes-have-new-key", what, c.Seal.ID(), ErrNodesNeedKey)
	}
	set := cur.Set.Clone()
	if err := c.Apply(&set); err != nil {
		return false, err
	}
	plain, err := set.Plaintext()
	if err != nil {
		return false, err
	}
	if found && !c.Reset && cur.KeyID == c.Seal.ID() {
		if was, _ := cur.Set.Plaintext(); bytes.Equal(was, plain) {
			res.NoOp = true
			return true, nil
		}
	}
	obj, err := seal(c.Seal, p, next, plain)
	if err != nil {
		return false, err
	}
	if _, err := b.Put(ctx, p.objectKey(next), bytes.NewReader(obj), int64(len(obj)), bucket.Condition{IfAbsent: true}); err != nil {
		if errors.Is(err, bucket.ErrPrecondition) {
			return false, nil // another writer took this seq
		}
		return false, err
	}
	cond := bucket.Condition{IfAbsent: true}
	if found {
		cond = bucket.Condition{IfVersion: tok}
	}
	line := []byte(seqName(next) + "\n")
	if _, err := b.Put(ctx, p.currentKey(), bytes.NewReader(line), int64(len(line)), cond); err != nil {
		if errors.Is(err, bucket.ErrPrecondition) {
			return false, nil // current moved: the object is left, skipped over
		}
		return false, err
	}
	res.To = next
	return true, nil
}

// object is a sealed object listed.
type object struct {
	bucket.Entry
	seq uint64
}

// objects lists the app's sealed objects, by seq: every key under the root
// is looked at and sorted here, not in the store's order.
func objects(ctx context.Context, b bucket.Bucket, p Place) ([]object, error) {
	entries, err := bucket.ListAll(ctx, b, p.root())
	if err != nil {
		return nil, err
	}
	var out []object
	for _, e := range entries {
		if seq, ok := parseSeq(strings.TrimPrefix(e.Key, p.root())); ok {
			out = append(out, object{e, seq})
		}
	}
	slices.SortFunc(out, func(x, y object) int { return cmp.Compare(x.seq, y.seq) })
	return out, nil
}

// highestSeq is the highest seq of the objects listed, 0 for none.
func highestSeq(ctx context.Context, b bucket.Bucket, p Place) (uint64, error) {
	objs, err := objects(ctx, b, p)
	if err != nil || len(objs) == 0 {
		return 0, err
	}
	return objs[len(objs)-1].seq, nil
}

// Collect deletes sealed objects that stopped being current more than
// retention before now, timed by the bucket's clock on the next object's
// write (its successor's). It keeps current, the object before it, and
// every object above current (a writer's, not current yet); it reads
// current itself and does nothing without one. The deletes are
// unconditional, of immutable objects no node reads any more. It returns
// the seqs deleted.
func Collect(ctx context.Context, b bucket.Bucket, p Place, retention time.Duration, now time.Time) ([]uint64, error) {
	cur, _, found, err := readCurrent(ctx, b, p)
	if err != nil || !found {
		return nil, err
	}
	objs, err := objects(ctx, b, p)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(objs, func(o object) bool { return o.seq == cur })
	if i < 0 {
		return nil, nil // current's object is missing: keep everything for a repair
	}
	var deleted []uint64
	for j := 0; j+1 < i; j++ { // below the one before current
		if now.Sub(objs[j+1].ModTime) < retention {
			continue
		}
		if err := b.Delete(ctx, objs[j].Key, bucket.Condition{}); err != nil && !errors.Is(err, bucket.ErrNotFound) {
			return deleted, fmt.Errorf("deleting %s: %w", objs[j].Key, err)
		}
		deleted = append(deleted, objs[j].seq)
	}
	return deleted, nil
}

// Apps lists the apps under the bucket that have secrets (a
// secrets/current), sorted: what rotate-key --all re-seals.
func Apps(ctx context.Context, b bucket.Bucket) ([]app.Name, error) {
	entries, err := bucket.ListAll(ctx, b, app.DeployPrefix)
	if err != nil {
		return nil, err
	}
	var out []app.Name
	for _, e := range entries {
		// apps/<t>/<a>/secrets/current, picked by its parts, whatever
		// order the store lists in.
		parts := strings.Split(strings.TrimPrefix(e.Key, app.DeployPrefix), "/")
		if len(parts) != 4 || parts[2] != app.SecretsDir || parts[3] != "current" {
			continue
		}
		if a := (app.Name{Tenant: parts[0], App: parts[1]}); a.Check() == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y app.Name) int { return strings.Compare(x.String(), y.String()) })
	return out, nil
}
