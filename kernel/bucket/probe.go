package bucket

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrIgnoresConditions: the bucket accepted a write its condition forbade.
// On such a bucket two nodes could own one actor, so a node must not use it.
var ErrIgnoresConditions = errors.New("bucket: the provider ignores conditional writes")

// ProbePrefix holds the probe's throwaway objects.
const ProbePrefix = "probe/"

// Probe is the check a node runs before it trusts a bucket (the book's
// start-time probe): on a throwaway object under probe/, a create over the
// existing object and a replace with a stale version must both be refused
// with ErrPrecondition, and leave the object as it was (read back after
// each). The object is deleted after, unconditionally: the probe needs no
// capability (a conditional delete) that the kernel does not rely on.
//
// The error, if any, says which step failed:
//   - ErrIgnoresConditions: the bucket must not be used (for good);
//   - ErrTransient: the bucket did not answer (a transient fault, or ctx
//     ended); the caller tries again later, as at any start;
//   - anything else (credentials, a missing bucket, a provider that refuses
//     a write it should accept): the bucket cannot be used as configured.
func Probe(ctx context.Context, b Bucket) (err error) {
	var nonce [12]byte
	rand.Read(nonce[:])
	key := ProbePrefix + time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(nonce[:])
	step := func(what string, e error) error {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(e, ErrTransient) {
			return fmt.Errorf("bucket probe: %s %s: %w (%w)", what, key, ErrTransient, ctxErr)
		}
		return fmt.Errorf("bucket probe: %s %s: %w", what, key, e)
	}
	put := func(body string, cond Condition) (Version, error) {
		return b.Put(ctx, key, strings.NewReader(body), int64(len(body)), cond)
	}

	v1, err := put("probe 1", Condition{IfAbsent: true})
	if err != nil {
		return step("create", err)
	}
	defer func() {
		// A failed probe leaves nothing behind either; its own error wins.
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			b.Delete(cctx, key, Condition{})
		}
	}()

	if _, err := put("probe 2", Condition{IfAbsent: true}); err == nil {
		return fmt.Errorf("bucket probe: a create over the existing %s was accepted: %w", key, ErrIgnoresConditions)
	} else if !errors.Is(err, ErrPrecondition) {
		return step("create over", err)
	}
	if err := expect(ctx, b, key, "probe 1"); err != nil {
		return step("read back", err)
	}
	if _, err := put("probe 3", Condition{IfVersion: v1}); err != nil {
		return step("replace at the version its create returned", err)
	}
	if _, err := put("probe 4", Condition{IfVersion: v1}); err == nil {
		return fmt.Errorf("bucket probe: a replace of %s with a stale version was accepted: %w", key, ErrIgnoresConditions)
	} else if !errors.Is(err, ErrPrecondition) {
		return step("replace with a stale version", err)
	}
	if err := expect(ctx, b, key, "probe 3"); err != nil {
		return step("read back", err)
	}
	// Unconditional: the object is the probe's own, and a store may lack
	// conditional deletes (the contract lets it).
	if err := b.Delete(ctx, key, Condition{}); err != nil {
		return step("delete", err)
	}
	return nil
}

// expect checks that a refused write left the object as it was.
func expect(ctx context.Context, b Bucket, key, want string) error {
	obj, err := b.Get(ctx, key, GetOptions{})
	if err != nil {
		return err
	}
	defer obj.Body.Close()
	got, err := io.ReadAll(io.LimitReader(obj.Body, int64(len(want))+1))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, []byte(want)) {
		return fmt.Errorf("holds %q after refusing a write, want %q: %w", got, want, ErrIgnoresConditions)
	}
	return nil
}
