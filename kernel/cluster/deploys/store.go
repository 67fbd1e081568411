package deploys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

var (
	// ErrConflict: current changed between the read a deploy or rollback
	// started from and its write; nothing was swapped.
	ErrConflict = errors.New("another deploy or rollback changed current meanwhile")
	// ErrNothingDeployed: the app has no current.
	ErrNothingDeployed = errors.New("nothing is deployed")
	// ErrMissingVersion: a version's manifest is not in the bucket.
	ErrMissingVersion = errors.New("the version is not in the bucket")
)

// keys are the bucket keys of an app's versions.
type keys struct{ root string }

func keysOf(a app.Name) keys { return keys{root: a.DeployRoot()} }

func (k keys) current() string           { return k.root + "current" }
func (k keys) dir(v string) string       { return k.root + v + "/" }
func (k keys) manifest(v string) string  { return k.dir(v) + "manifest" }
func (k keys) module(v, c string) string { return k.dir(v) + c + ".wasm" }
func (k keys) config(v, c string) string { return k.dir(v) + c + ".config" }

// versionDir is the directory under the root that key is in, other than
// the app's secrets (ADR 1050), which are not a version.
func (k keys) versionDir(key string) (string, bool) {
	v, _, ok := strings.Cut(strings.TrimPrefix(key, k.root), "/")
	return v, ok && v != app.SecretsDir
}

// front's key cannot be a class's: a class name starts with a letter.
func (k keys) front(v string) string { return k.dir(v) + "_front.wasm" }

// The most each kind of object may hold: every node reads them whole into
// memory, so an object planted or grown by mistake must not exhaust them.
const (
	maxCurrent  = 1 << 10
	maxManifest = 1 << 20
	maxConfig   = envfile.MaxSize
	// A module is held whole to check its digest and compile it; real
	// components are tens of MiB at most, and a node's memory must still
	// hold the rest of the version.
	maxModule = 256 << 20
)

// errTooLarge: an object is over its kind's cap.
var errTooLarge = errors.New("over its cap")

// get reads a whole object of at most max bytes; a larger one is refused
// before its body is read, or once max is passed if its size was wrong.
func get(ctx context.Context, b bucket.Bucket, key string, max int64) ([]byte, *bucket.Object, error) {
	o, err := b.Get(ctx, key, bucket.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer o.Body.Close()
	tooLarge := fmt.Errorf("%s: %w of %d bytes: refused", key, errTooLarge, max)
	if o.Size > max {
		return nil, nil, tooLarge
	}
	data, err := io.ReadAll(io.LimitReader(o.Body, max+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", key, err)
	}
	if int64(len(data)) > max {
		return nil, nil, tooLarge
	}
	return data, o, nil
}

// readCurrent reads current and the token a swap conditions on; found is
// false when the app has none.
func readCurrent(ctx context.Context, b bucket.Bucket, k keys) (cur Current, tok bucket.Version, found bool, err error) {
	data, o, err := get(ctx, b, k.current(), maxCurrent)
	if errors.Is(err, bucket.ErrNotFound) {
		return Current{}, "", false, nil
	}
	if err != nil {
		return Current{}, "", false, err
	}
	cur, err = ParseCurrent(k.current(), data)
	return cur, o.Version, err == nil, err
}

// readManifest reads version v's manifest and when it was written.
func readManifest(ctx context.Context, b bucket.Bucket, k keys, v string) (Manifest, time.Time, error) {
	data, o, err := get(ctx, b, k.manifest(v), maxManifest)
	if errors.Is(err, bucket.ErrNotFound) {
		return Manifest{}, time.Time{}, fmt.Errorf("version %s (%s): %w", v, k.manifest(v), ErrMissingVersion)
	}
	if err != nil {
		return Manifest{}, time.Time{}, err
	}
	m, err := ParseManifest(k.manifest(v), data)
	if err == nil && m.ID() != v {
		err = fmt.Errorf("%s: its content is version %s, not %s", k.manifest(v), m.ID(), v)
	}
	return m, o.ModTime, err
}

// readArtifact reads an object a manifest names by digest, of at most max
// bytes, refusing one whose content is not that digest's.
func readArtifact(ctx context.Context, b bucket.Bucket, key, digest string, max int64) ([]byte, error) {
	data, _, err := get(ctx, b, key, max)
	if err != nil {
		return nil, err
	}
	if Digest(data) != digest {
		return nil, fmt.Errorf("%s: its SHA-256 is not the manifest's (altered or corrupt): refused", key)
	}
	return data, nil
}

// readConfig reads and parses a .config object.
func readConfig(ctx context.Context, b bucket.Bucket, key, digest string) (map[string]string, error) {
	data, err := readArtifact(ctx, b, key, digest, maxConfig)
	if err != nil {
		return nil, err
	}
	return envfile.ParseBytes(key, data)
}

// putImmutable creates key holding data. Keys under a version are
// content-addressed, so an object already there must hold the same bytes
// (a deploy of the same version that stopped half-way); anything else is
// refused rather than used.
func putImmutable(ctx context.Context, b bucket.Bucket, key string, data []byte) error {
	_, err := b.Put(ctx, key, bytes.NewReader(data), int64(len(data)), bucket.Condition{IfAbsent: true})
	if !errors.Is(err, bucket.ErrPrecondition) {
		return err
	}
	there, _, err := get(ctx, b, key, int64(len(data)))
	if err != nil && !errors.Is(err, errTooLarge) {
		return err
	}
	if err != nil || !bytes.Equal(there, data) {
		return fmt.Errorf("%s exists with other content than this deploy's: refused (a version's objects never change)", key)
	}
	return nil
}

// swapCurrent writes next into current on condition cond (IfVersion the
// token read, or IfAbsent for the first), which decides the current
// version: a condition that fails is ErrConflict.
func swapCurrent(ctx context.Context, b bucket.Bucket, k keys, next Current, cond bucket.Condition) error {
	data := next.format()
	_, err := b.Put(ctx, k.current(), bytes.NewReader(data), int64(len(data)), cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		return fmt.Errorf("%s: %w; nothing was changed: look at it again and retry", k.current(), ErrConflict)
	}
	return err
}
