package buckettest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// env is what a rule runs with: its bucket, its own prefix and the options.
type env struct {
	ctx    context.Context
	b      bucket.Bucket
	opts   Options
	prefix string
}

func (e *env) key(name string) string { return e.prefix + name }

var (
	create = bucket.Condition{IfAbsent: true}
	always = bucket.Condition{}
)

func at(v bucket.Version) bucket.Condition { return bucket.Condition{IfVersion: v} }

func describe(c bucket.Condition) string {
	switch {
	case c.IfAbsent:
		return "if absent"
	case c.IfVersion != "":
		return fmt.Sprintf("if version %q", c.IfVersion)
	}
	return "unconditionally"
}

// put writes body and checks that a success returns a version.
func (e *env) put(key string, body []byte, cond bucket.Condition) (bucket.Version, error) {
	v, err := e.b.Put(e.ctx, key, onlyReader{bytes.NewReader(body)}, int64(len(body)), cond)
	if err != nil {
		return "", fmt.Errorf("Put %s %s: %w", key, describe(cond), err)
	}
	if v == "" {
		return "", fmt.Errorf("Put %s %s returned an empty version", key, describe(cond))
	}
	return v, nil
}

// onlyReader hides every method but Read, so a provider cannot rely on a
// body it can seek or measure.
type onlyReader struct{ io.Reader }

// get reads a whole object or a range of it.
func (e *env) get(key string, opts bucket.GetOptions) ([]byte, *bucket.Object, error) {
	obj, err := e.b.Get(e.ctx, key, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("Get %s %+v: %w", key, opts, err)
	}
	defer obj.Body.Close()
	data, err := io.ReadAll(obj.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("Get %s %+v: reading the body: %w", key, opts, err)
	}
	if obj.Version == "" {
		return nil, nil, fmt.Errorf("Get %s returned an empty version", key)
	}
	return data, obj, nil
}

// holds checks that key holds want.
func (e *env) holds(key string, want []byte) error {
	got, _, err := e.get(key, bucket.GetOptions{})
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s holds %s, want %s", key, quote(got), quote(want))
	}
	return nil
}

// quote shows a body briefly.
func quote(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// sentinels are the contract's errors; a failure must match exactly one.
var sentinels = []error{bucket.ErrNotFound, bucket.ErrPrecondition, bucket.ErrTransient, bucket.ErrRange, bucket.ErrInvalidKey}

// is checks that err (from what) matches want and no other sentinel.
func is(err, want error, what string) error {
	if err == nil {
		return fmt.Errorf("%s succeeded, want %v", what, want)
	}
	if !errors.Is(err, want) {
		return fmt.Errorf("%s: got %v, want an error matching %v", what, err, want)
	}
	for _, s := range sentinels {
		if s != want && errors.Is(err, s) {
			return fmt.Errorf("%s: %v matches both %v and %v", what, err, want, s)
		}
	}
	return nil
}

// listAll follows a listing from page to page and checks each page: at most
// Limit entries, keys under prefix, none listed twice, and a listing that
// ends. Order is checked only where every provider keeps it (mayPrecede):
// byte order across a "/" is a capability (ListByteOrder).
func listAll(ctx context.Context, b bucket.Bucket, prefix string, opts bucket.ListOptions) ([]bucket.Entry, error) {
	var all []bucket.Entry
	seen := map[string]bool{}
	last := opts.StartAfter
	for pages := 0; ; pages++ {
		page, err := b.List(ctx, prefix, opts)
		if err != nil {
			return nil, fmt.Errorf("List %s %+v: %w", prefix, opts, err)
		}
		if opts.Limit > 0 && len(page.Entries) > opts.Limit {
			return nil, fmt.Errorf("List %s %+v returned %d entries", prefix, opts, len(page.Entries))
		}
		for _, en := range page.Entries {
			switch {
			case !strings.HasPrefix(en.Key, prefix):
				return nil, fmt.Errorf("List %s %+v returned %s, outside the prefix", prefix, opts, en.Key)
			case seen[en.Key]:
				return nil, fmt.Errorf("List %s %+v returned %s twice", prefix, opts, en.Key)
			case !mayPrecede(last, en.Key):
				return nil, fmt.Errorf("List %s %+v returned %s after %s: out of byte order within a directory (or not after StartAfter)", prefix, opts, en.Key, last)
			case en.Version == "":
				return nil, fmt.Errorf("List %s returned %s with an empty version", prefix, en.Key)
			case en.ModTime.IsZero():
				return nil, fmt.Errorf("List %s returned %s without a modification time", prefix, en.Key)
			}
			seen[en.Key] = true
			last = en.Key
		}
		all = append(all, page.Entries...)
		if page.Next == "" {
			return all, nil
		}
		if len(page.Entries) == 0 && page.Next == opts.StartAfter || pages > len(all)+1 {
			return nil, fmt.Errorf("List %s %+v: the listing does not end (next %q)", prefix, opts, page.Next)
		}
		opts.StartAfter = page.Next
	}
}

// mayPrecede reports whether a listing may show key a before key b: a
// sorts first in byte order, or the two first differ at a "/" (d/x and
// d-/x), where a provider walking directories puts them the other way.
func mayPrecede(a, b string) bool {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return a < b || i < len(a) && a[i] == '/' || i < len(b) && b[i] == '/'
}

// sameKeys checks a listing against the keys expected, in order.
func sameKeys(what string, got []bucket.Entry, want []string) error {
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return fmt.Errorf("%s: %d entries, want %d: %s missing", what, len(got), len(want), want[i])
		case i >= len(want):
			return fmt.Errorf("%s: %d entries, want %d: %s is extra", what, len(got), len(want), got[i].Key)
		case got[i].Key != want[i]:
			return fmt.Errorf("%s: entry %d is %s, want %s", what, i, got[i].Key, want[i])
		}
	}
	return nil
}

// sameKeySet checks a listing against the keys expected (sorted), in any
// order.
func sameKeySet(what string, got []bucket.Entry, want []string) error {
	sorted := slices.SortedFunc(slices.Values(got), func(a, b bucket.Entry) int { return strings.Compare(a.Key, b.Key) })
	return sameKeys(what, sorted, want)
}

// stream is a body of n pseudo-random bytes, made as it is read, from seed.
func stream(seed uint64, n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8(seedBytes(seed)), n)
}

func seedBytes(seed uint64) (s [32]byte) {
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

// digest hashes what r yields.
func digest(r io.Reader) ([]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return h.Sum(nil), n, err
}

// randomBytes returns n bytes from seed.
func randomBytes(seed uint64, n int) []byte {
	b, _ := io.ReadAll(stream(seed, int64(n)))
	return b
}
