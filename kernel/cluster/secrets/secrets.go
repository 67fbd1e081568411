// Package secrets keeps an app's secrets in the bucket, sealed (the book's
// ADR 0016, ADR 1050): one immutable object per change under
// apps/<tenant>/<app>/secrets/<seq>, ChaCha20-Poly1305 under a key derived
// per app and prefix from a 32-byte secrets key, bound to its format,
// prefix, tenant, app, seq and key id; and secrets/current naming the
// current one, replaced only on a condition. Nothing here ever puts a
// value in an error, a log or a printed form: Set and Key print names and
// ids only.
package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Place is where an app's secrets are, and what they are sealed for: the
// bucket's prefix (the bucket plugin's own, without slashes around it; ""
// for none) and the app.
type Place struct {
	Prefix string
	App    app.Name
}

func (p Place) root() string { return p.App.SecretsRoot() }

func (p Place) currentKey() string { return p.root() + "current" }

func (p Place) objectKey(seq uint64) string { return p.root() + seqName(seq) }

// location is the object's key with the prefix before it: what an object
// is sealed for, shown when one is found elsewhere.
func (p Place) location(seq uint64) string { return p.Prefix + "/" + p.objectKey(seq) }

// seqName is a seq as an object's name and as current holds it: 16 hex
// digits, so a listing is in seq order.
func seqName(seq uint64) string { return fmt.Sprintf("%016x", seq) }

func parseSeq(s string) (uint64, bool) {
	if len(s) != 16 || strings.ToLower(s) != s {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 16, 64)
	return n, err == nil && n > 0
}

// maxCurrent bounds secrets/current, a seq and a newline.
const maxCurrent = 64

// get reads a whole object of at most max bytes, refusing a larger one
// (ErrAltered, with the object's head) before its body is read.
func get(ctx context.Context, b bucket.Bucket, key string, max int64) ([]byte, *bucket.Object, error) {
	o, err := b.Get(ctx, key, bucket.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer o.Body.Close()
	if o.Size > max {
		return nil, o, fmt.Errorf("%s: %w: %d bytes, over the %d it may hold: refused unread", key, ErrAltered, o.Size, max)
	}
	data, err := io.ReadAll(io.LimitReader(o.Body, max+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", key, err)
	}
	if int64(len(data)) > max {
		return nil, o, fmt.Errorf("%s: %w: over the %d bytes it may hold: refused", key, ErrAltered, max)
	}
	return data, o, nil
}

// ErrCorruptCurrent: secrets/current does not hold a seq.
var ErrCorruptCurrent = errors.New("does not hold a seq (16 hex digits and a newline)")

// readCurrent reads current's seq and version; found is false when the
// app has no secrets. A current that does not parse is ErrCorruptCurrent,
// with its version (reset replaces it).
func readCurrent(ctx context.Context, b bucket.Bucket, p Place) (seq uint64, tok bucket.Version, found bool, err error) {
	data, o, err := get(ctx, b, p.currentKey(), maxCurrent)
	if errors.Is(err, bucket.ErrNotFound) {
		return 0, "", false, nil
	}
	if errors.Is(err, ErrAltered) { // oversized: corrupt (not ErrAltered, which blocks at once; not an outage)
		return 0, o.Version, true, fmt.Errorf("%s %w: over %d bytes", p.currentKey(), ErrCorruptCurrent, maxCurrent)
	}
	if err != nil {
		return 0, "", false, err
	}
	seq, ok := parseSeq(strings.TrimSuffix(string(data), "\n"))
	if !ok || !bytes.HasSuffix(data, []byte("\n")) {
		return 0, o.Version, true, fmt.Errorf("%s %w", p.currentKey(), ErrCorruptCurrent)
	}
	return seq, o.Version, true, nil
}

// Current is the set current names.
type Current struct {
	Seq   uint64 // 0: the app has no secrets
	KeyID string // the key it is sealed under
	Set   Set
}

// ErrMissing: current names an object that is not in the bucket.
var ErrMissing = errors.New("is not in the bucket")

// Read opens the set current names with whichever of keys sealed it. An
// app without secrets is the zero Current. Errors say what is wrong (no
// key, another key, an altered object, one sealed for another place, a
// missing one) and never hold a value.
func Read(ctx context.Context, b bucket.Bucket, p Place, keys []Key) (Current, error) {
	seq, _, found, err := readCurrent(ctx, b, p)
	if err != nil || !found {
		return Current{}, err
	}
	return readObject(ctx, b, p, keys, seq)
}

func readObject(ctx context.Context, b bucket.Bucket, p Place, keys []Key, seq uint64) (Current, error) {
	data, _, err := get(ctx, b, p.objectKey(seq), maxObject)
	if errors.Is(err, bucket.ErrNotFound) {
		return Current{}, fmt.Errorf("%s, which %s names, %w", p.objectKey(seq), p.currentKey(), ErrMissing)
	}
	if err != nil {
		return Current{}, err
	}
	set, keyID, err := open(keys, p, seq, data)
	if err != nil {
		return Current{}, err
	}
	return Current{Seq: seq, KeyID: keyID, Set: set}, nil
}
