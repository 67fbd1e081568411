package buckettest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

var rules = []Rule{
	{Name: "GetWhole", Summary: "Get reads back what Put wrote, with its size, version and time", check: getWhole},
	{Name: "GetRange", Summary: "ranged Gets: inside, to the end, cut at the end; a range not starting inside the object is ErrRange", check: getRange},
	{Name: "VersionsAgree", Summary: "the version tokens of Put, Get and List are each accepted while the object is unchanged, and refused after", check: versionsAgree},
	{Name: "CreateIfAbsent", Summary: "a create over an existing object is refused and changes nothing; a deleted key can be created again", check: createIfAbsent},
	{Name: "ReplaceIfVersion", Summary: "a replace at the current version succeeds; at a missing key it is refused; an unconditional Put overwrites", check: replaceIfVersion},
	{Name: "StaleVersion", Summary: "a replace with a stale or unknown version is refused, also after quick same-size replaces", check: staleVersion},
	{Name: "Delete", Summary: "a delete removes the object; a missing key is ErrNotFound; IfAbsent is refused", check: deleteRule},
	{Name: "ErrorsDistinct", Summary: "not found, precondition and an ended context are told apart", check: errorsDistinct},
	{Name: "InvalidKeys", Summary: "keys and prefixes breaking the key rule are ErrInvalidKey and write nothing", check: invalidKeys},
	{Name: "KernelKeys", Summary: "keys with every character the kernel writes round-trip and are all listed", check: kernelKeys},
	{Name: "ListPages", Summary: "a listing of many keys: each once, in pages of at most Limit, byte order within a directory, prefix isolation", check: listPages, sizes: listSizes},
	{Name: "EmptyObject", Summary: "a 0-byte object is written, read, listed and replaced", check: emptyObject},
	{Name: "LargeObject", Summary: "a large object is streamed in and out intact, whole and ranged", check: largeObject, sizes: largeSizes},
	{Name: "BodySize", Summary: "a body shorter or longer than its declared size writes nothing", check: bodySize},
	{Name: "RaceCreate", Summary: "writers racing to create one key: exactly one wins, every round", check: raceCreate, sizes: raceSizes},
	{Name: "RaceReplace", Summary: "writers racing to replace one version: exactly one wins, every round", check: raceReplace, sizes: raceSizes},
	{Name: "GetDuringReplace", Summary: "Gets racing replaces each read one write whole: never a later write's version with an earlier write's body", check: getDuringReplace, sizes: replaceReadSizes},
	{Name: "Probe", Summary: "the start-time probe (bucket.Probe) passes", check: probe},

	// Capabilities: reported, not required (package bucket: what the
	// kernel does not rely on).
	{Name: "ConditionalDelete", Summary: "a delete at a stale version is ErrPrecondition and deletes nothing; at the current version it deletes", check: conditionalDelete,
		Capability: true, Without: "the kernel never deletes conditionally: it hands objects over with conditional Puts"},
	{Name: "ListByteOrder", Summary: "listings and StartAfter follow byte order across /: d-/x before d/x before d.x/y", check: listByteOrder,
		Capability: true, Without: "the kernel never relies on the order of keys that first differ at a /"},
}

func listSizes(o Options) string  { return fmt.Sprintf("%d keys", o.ListKeys) }
func largeSizes(o Options) string { return byteSize(o.LargeSize) }
func raceSizes(o Options) string  { return fmt.Sprintf("%d writers, %d rounds", o.Writers, o.Rounds) }
func replaceReadSizes(o Options) string {
	return fmt.Sprintf("%d replaces, %d readers", replaces(o), replaceReaders)
}

// replaces is how many times GetDuringReplace replaces its object.
func replaces(o Options) int { return 100 + 20*o.Rounds }

const replaceReaders = 3

// byteSize names n in the largest binary unit that divides it.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func getWhole(e *env) error {
	k := e.key("object")
	body := randomBytes(1, 1000)
	before := time.Now()
	if _, err := e.put(k, body, create); err != nil {
		return err
	}
	got, obj, err := e.get(k, bucket.GetOptions{})
	if err != nil {
		return err
	}
	if !bytes.Equal(got, body) || obj.Size != int64(len(body)) {
		return fmt.Errorf("Get %s: %d bytes (size %d) that differ from the %d written", k, len(got), obj.Size, len(body))
	}
	// A day either way allows any clock skew a cluster could live with.
	if d := obj.ModTime.Sub(before); d < -24*time.Hour || d > 24*time.Hour {
		return fmt.Errorf("Get %s: modification time %v, written at %v", k, obj.ModTime, before)
	}
	return nil
}

func getRange(e *env) error {
	k := e.key("object")
	body := randomBytes(2, 1000)
	if _, err := e.put(k, body, create); err != nil {
		return err
	}
	_, whole, err := e.get(k, bucket.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range []struct {
		off, n   int64
		from, to int
	}{
		{0, 0, 0, 1000}, {10, 0, 10, 1000}, {10, 20, 10, 30}, {990, 100, 990, 1000},
		{999, 1, 999, 1000}, {0, 1000, 0, 1000}, {0, 5000, 0, 1000},
	} {
		opts := bucket.GetOptions{Offset: c.off, Length: c.n}
		got, obj, err := e.get(k, opts)
		if err != nil {
			return err
		}
		if want := body[c.from:c.to]; !bytes.Equal(got, want) {
			return fmt.Errorf("Get %s %+v: %d bytes, want bytes %d to %d", k, opts, len(got), c.from, c.to)
		}
		if obj.Size != 1000 || obj.Version != whole.Version {
			return fmt.Errorf("Get %s %+v: size %d and version %q, want the whole object's 1000 and %q", k, opts, obj.Size, obj.Version, whole.Version)
		}
	}
	for _, opts := range []bucket.GetOptions{{Offset: 1000}, {Offset: 1000, Length: 1}, {Offset: 5000, Length: 10}, {Offset: -1}, {Length: -1}} {
		_, err := e.b.Get(e.ctx, k, opts)
		if err := is(err, bucket.ErrRange, fmt.Sprintf("Get %s %+v of a 1000-byte object", k, opts)); err != nil {
			return err
		}
	}
	return nil
}

// entry finds key in a listing of its parent prefix.
func (e *env) entry(key string) (bucket.Entry, error) {
	entries, err := listAll(e.ctx, e.b, e.prefix, bucket.ListOptions{})
	if err != nil {
		return bucket.Entry{}, err
	}
	for _, en := range entries {
		if en.Key == key {
			return en, nil
		}
	}
	return bucket.Entry{}, fmt.Errorf("List %s does not show %s", e.prefix, key)
}

func versionsAgree(e *env) error {
	k := e.key("object")
	b1, b2, b3, b4 := []byte("first"), []byte("second"), []byte("third!"), []byte("fourth")
	put1, err := e.put(k, b1, create)
	if err != nil {
		return err
	}
	_, got1, err := e.get(k, bucket.GetOptions{})
	if err != nil {
		return err
	}
	listed1, err := e.entry(k)
	if err != nil {
		return err
	}
	if listed1.Size != int64(len(b1)) {
		return fmt.Errorf("List shows %s with size %d, want %d", k, listed1.Size, len(b1))
	}
	// Get's token replaces; then all three of the first write's are stale.
	if _, err := e.put(k, b2, at(got1.Version)); err != nil {
		return fmt.Errorf("replacing at the version Get returned: %w", err)
	}
	for src, v := range map[string]bucket.Version{"Put": put1, "Get": got1.Version, "List": listed1.Version} {
		_, err := e.b.Put(e.ctx, k, bytes.NewReader(b3), int64(len(b3)), at(v))
		if err := is(err, bucket.ErrPrecondition, fmt.Sprintf("Put %s at the version %s returned before a replace", k, src)); err != nil {
			return err
		}
	}
	listed2, err := e.entry(k)
	if err != nil {
		return err
	}
	put3, err := e.put(k, b3, at(listed2.Version))
	if err != nil {
		return fmt.Errorf("replacing at the version List returned: %w", err)
	}
	if _, err := e.put(k, b4, at(put3)); err != nil {
		return fmt.Errorf("replacing at the version Put returned: %w", err)
	}
	return e.holds(k, b4)
}

func createIfAbsent(e *env) error {
	k := e.key("object")
	if _, err := e.put(k, []byte("first"), create); err != nil {
		return err
	}
	_, err := e.b.Put(e.ctx, k, strings.NewReader("second"), 6, create)
	if err := is(err, bucket.ErrPrecondition, "a create over "+k); err != nil {
		return err
	}
	if err := e.holds(k, []byte("first")); err != nil {
		return fmt.Errorf("after a refused create: %w", err)
	}
	if err := e.b.Delete(e.ctx, k, always); err != nil {
		return fmt.Errorf("Delete %s: %w", k, err)
	}
	if _, err := e.put(k, []byte("third"), create); err != nil {
		return fmt.Errorf("creating a deleted key again: %w", err)
	}
	return e.holds(k, []byte("third"))
}

func replaceIfVersion(e *env) error {
	k, missing := e.key("object"), e.key("missing")
	v1, err := e.put(k, []byte("one"), create)
	if err != nil {
		return err
	}
	if _, err := e.put(k, []byte("two"), at(v1)); err != nil {
		return err
	}
	if err := e.holds(k, []byte("two")); err != nil {
		return err
	}
	_, err = e.b.Put(e.ctx, missing, strings.NewReader("x"), 1, at(v1))
	if err := is(err, bucket.ErrPrecondition, "a replace of the missing "+missing); err != nil {
		return err
	}
	_, err = e.b.Get(e.ctx, missing, bucket.GetOptions{})
	if err := is(err, bucket.ErrNotFound, "Get "+missing+" after a refused replace"); err != nil {
		return err
	}
	if _, err := e.put(k, []byte("three"), always); err != nil {
		return err
	}
	return e.holds(k, []byte("three"))
}

func staleVersion(e *env) error {
	k := e.key("object")
	v, err := e.put(k, []byte("version 0"), create)
	if err != nil {
		return err
	}
	// Same-size bodies back to back: a version made of size and a coarse
	// modification time would repeat, and a stale token would pass.
	for i := 1; i <= 10; i++ {
		body := fmt.Appendf(nil, "version %d", i)
		next, err := e.put(k, body, at(v))
		if err != nil {
			return err
		}
		_, err = e.b.Put(e.ctx, k, strings.NewReader("stale!!!!"), 9, at(v))
		if err := is(err, bucket.ErrPrecondition, fmt.Sprintf("replace %d of %s at the version before it", i, k)); err != nil {
			return err
		}
		if err := e.holds(k, body); err != nil {
			return fmt.Errorf("after a refused stale replace: %w", err)
		}
		v = next
	}
	_, err = e.b.Put(e.ctx, k, strings.NewReader("x"), 1, at("no-such-version"))
	return is(err, bucket.ErrPrecondition, "a replace of "+k+" at a version the provider never issued")
}

func deleteRule(e *env) error {
	k1, k3 := e.key("plain"), e.key("kept")
	if _, err := e.put(k1, []byte("x"), create); err != nil {
		return err
	}
	if err := e.b.Delete(e.ctx, k1, always); err != nil {
		return fmt.Errorf("Delete %s: %w", k1, err)
	}
	_, err := e.b.Get(e.ctx, k1, bucket.GetOptions{})
	if err := is(err, bucket.ErrNotFound, "Get "+k1+" after Delete"); err != nil {
		return err
	}
	if err := is(e.b.Delete(e.ctx, k1, always), bucket.ErrNotFound, "a second Delete of "+k1); err != nil {
		return err
	}
	if _, err := e.put(k3, []byte("kept"), create); err != nil {
		return err
	}
	if err := e.b.Delete(e.ctx, k3, create); err == nil {
		return fmt.Errorf("Delete %s if absent succeeded, want it refused", k3)
	}
	entries, err := listAll(e.ctx, e.b, e.prefix, bucket.ListOptions{})
	if err != nil {
		return err
	}
	return sameKeys("List after the deletes", entries, []string{k3})
}

// conditionalDelete is the capability: S3 has it (If-Match on DELETE);
// MinIO and gofakes3 delete whatever the condition.
func conditionalDelete(e *env) error {
	k, missing := e.key("conditional"), e.key("missing")
	if err := is(e.b.Delete(e.ctx, missing, at("v")), bucket.ErrNotFound, "a conditional Delete of the missing "+missing); err != nil {
		return err
	}
	v1, err := e.put(k, []byte("one"), create)
	if err != nil {
		return err
	}
	v2, err := e.put(k, []byte("two"), at(v1))
	if err != nil {
		return err
	}
	if err := is(e.b.Delete(e.ctx, k, at(v1)), bucket.ErrPrecondition, "Delete "+k+" at a stale version"); err != nil {
		return err
	}
	if err := e.holds(k, []byte("two")); err != nil {
		return fmt.Errorf("after a refused Delete: %w", err)
	}
	if err := e.b.Delete(e.ctx, k, at(v2)); err != nil {
		return fmt.Errorf("Delete %s at its version: %w", k, err)
	}
	_, err = e.b.Get(e.ctx, k, bucket.GetOptions{})
	return is(err, bucket.ErrNotFound, "Get "+k+" after a Delete at its version")
}

func errorsDistinct(e *env) error {
	k, missing := e.key("object"), e.key("missing")
	v1, err := e.put(k, []byte("one"), create)
	if err != nil {
		return err
	}
	if _, err := e.put(k, []byte("two"), at(v1)); err != nil {
		return err
	}
	_, err = e.b.Get(e.ctx, missing, bucket.GetOptions{})
	if err := is(err, bucket.ErrNotFound, "Get "+missing); err != nil {
		return err
	}
	_, err = e.b.Get(e.ctx, missing, bucket.GetOptions{Offset: 1, Length: 1})
	if err := is(err, bucket.ErrNotFound, "a ranged Get of "+missing); err != nil {
		return err
	}
	_, err = e.b.Put(e.ctx, k, strings.NewReader("x"), 1, create)
	if err := is(err, bucket.ErrPrecondition, "a create over "+k); err != nil {
		return err
	}
	_, err = e.b.Put(e.ctx, k, strings.NewReader("x"), 1, at(v1))
	if err := is(err, bucket.ErrPrecondition, "a replace of "+k+" at a stale version"); err != nil {
		return err
	}
	// A request whose context has ended is neither: the caller may retry.
	ended, cancel := context.WithCancel(e.ctx)
	cancel()
	for what, err := range map[string]error{
		"Get":    func() error { _, err := e.b.Get(ended, k, bucket.GetOptions{}); return err }(),
		"Put":    func() error { _, err := e.b.Put(ended, missing, strings.NewReader("x"), 1, create); return err }(),
		"Delete": e.b.Delete(ended, k, always),
		"List":   func() error { _, err := e.b.List(ended, e.prefix, bucket.ListOptions{}); return err }(),
	} {
		if err == nil {
			return fmt.Errorf("%s with an ended context succeeded", what)
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, bucket.ErrTransient) {
			return fmt.Errorf("%s with an ended context: %v, want context.Canceled or ErrTransient", what, err)
		}
		if errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition) {
			return fmt.Errorf("%s with an ended context: %v looks like a refusal", what, err)
		}
	}
	return e.holds(k, []byte("two"))
}

func invalidKeys(e *env) error {
	p := e.prefix
	for _, k := range []string{
		"", "/" + p + "abs", p + "a//b", p + "a/./b", p + "../escape", p + "a/..", p + "trailing/",
		p + "space here", p + "caf\u00e9", p + "nul\x00", p + "back\\slash", p + strings.Repeat("s", 256),
	} {
		_, err := e.b.Put(e.ctx, k, strings.NewReader("x"), 1, always)
		if err := is(err, bucket.ErrInvalidKey, fmt.Sprintf("Put %q", k)); err != nil {
			return err
		}
		_, err = e.b.Get(e.ctx, k, bucket.GetOptions{})
		if err := is(err, bucket.ErrInvalidKey, fmt.Sprintf("Get %q", k)); err != nil {
			return err
		}
		if err := is(e.b.Delete(e.ctx, k, always), bucket.ErrInvalidKey, fmt.Sprintf("Delete %q", k)); err != nil {
			return err
		}
	}
	for _, prefix := range []string{"/", p + "a//", p + "../", p + "sp ace"} {
		_, err := e.b.List(e.ctx, prefix, bucket.ListOptions{})
		if err := is(err, bucket.ErrInvalidKey, fmt.Sprintf("List %q", prefix)); err != nil {
			return err
		}
	}
	// The rules before this one cleaned up: anything in the run is a
	// refused key written after all (".." resolved, "//" collapsed).
	entries, err := listAll(e.ctx, e.b, e.opts.Prefix, bucket.ListOptions{})
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("a refused key left %s behind", entries[0].Key)
	}
	return nil
}

// kernelKeyNames are names the kernel writes (book: What is in the bucket; actor
// names percent-encoded into the unreserved set; an app's actor state under
// its state root, ADR 1045), plus names that trip file-system providers:
// sidecar and temporary suffixes, dot names, case.
var kernelKeyNames = []string{
	"nodes/node-1", "nodes/a0-b9", "cluster/secret",
	"state/acme/shop/leases/acme/chat/caf%C3%A9%20room%2F%25",
	"state/acme/shop/owners/acme/chat/x.attrs", "state/acme/shop/owners/acme/chat/x.tmp", "state/acme/shop/owners/acme/chat/.hidden",
	"state/acme/shop/owners/acme/chat/..dots", "state/acme/shop/owners/acme/chat/...", "state/acme/shop/owners/acme/chat/~n_a.m-e",
	"state/acme/shop/owners/acme/chat/Name", "state/acme/shop/owners/acme/chat/name",
	"state/acme/shop/actors/acme/chat/room/wal/0000000000000001-0000000000000002.ltx",
	"state/acme/shop/actors/acme/chat/room/snapshot/0000000000000040-0000000000000002",
	"state/acme/shop/alarms/0000018c2f/chat.t/room/0000000000000002-a1b2c3",
	"state/acme/shop-2/owners/acme/chat/x.attrs", // a sibling app whose name starts with the first's
	"apps/acme/shop/current", "apps/acme/shop/9cf4de9152d8dd29/manifest", "apps/acme/shop/9cf4de9152d8dd29/chat.wasm",
	"pct/%2E%2E", "pct/%2F",
	// Byte order, not directory order: % - . / 0 A _ ~.
	"order/b~", "order/b_", "order/bA", "order/b0", "order/b/c", "order/b.c", "order/b-c", "order/b%25",
}

func kernelKeys(e *env) error {
	keys := []string{}
	for _, k := range kernelKeyNames {
		keys = append(keys, e.key(k))
	}
	keys = append(keys, e.key("long/"+strings.Repeat("x", bucket.MaxSegmentLen)))
	keys = append(keys, longestKey(e.key("max")))
	for _, k := range keys {
		if _, err := e.put(k, []byte(k), create); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if err := e.holds(k, []byte(k)); err != nil {
			return err
		}
	}
	slices.Sort(keys)
	entries, err := listAll(e.ctx, e.b, e.prefix, bucket.ListOptions{})
	if err != nil {
		return err
	}
	if err := sameKeySet("List "+e.prefix, entries, keys); err != nil {
		return err
	}
	sub := e.key("state/acme/shop/owners/acme/chat/")
	entries, err = listAll(e.ctx, e.b, sub, bucket.ListOptions{})
	if err != nil {
		return err
	}
	return sameKeySet("List "+sub, entries, under(keys, sub))
}

// longestKey extends start with segments of up to 200 bytes to a key of
// exactly MaxKeyLen bytes.
func longestKey(start string) string {
	long := start
	for rem := bucket.MaxKeyLen - len(long); rem > 0; rem = bucket.MaxKeyLen - len(long) {
		seg := min(200, rem-1)
		if rem-seg-1 == 1 { // one byte left could not make a segment
			seg--
		}
		long += "/" + strings.Repeat("m", seg)
	}
	return long
}

// under filters sorted keys by prefix.
func under(keys []string, prefix string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// listKeys makes n distinct keys under base: leaves and three directories
// (one nested), from every key character, none both an object and a parent.
func listKeys(base string, n int) []string {
	const alphabet = "%-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	r := rand.New(rand.NewPCG(7, 7))
	dirs := []string{"", "d/", "d-/", "d.x/", "d/e/"}
	seen := map[string]bool{}
	var keys []string
	for len(keys) < n {
		leaf := make([]byte, 3+r.IntN(10))
		for i := range leaf {
			leaf[i] = alphabet[r.IntN(len(alphabet))]
		}
		k := base + dirs[r.IntN(len(dirs))] + string(leaf)
		if seen[k] || k == base+"d.x" {
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	return keys
}

func listPages(e *env) error {
	base := e.key("keys/")
	keys := listKeys(base, e.opts.ListKeys)
	// Neighbours a listing of base must not show.
	outside := []string{e.key("keys-/n"), e.key("keysZ"), e.key("key"), e.key("keys.x/n")}
	if err := e.putAll(append(slices.Clone(keys), outside...)); err != nil {
		return err
	}
	slices.Sort(keys)
	// Pages of 37 end between keys a store walking directories lists out
	// of byte order: going on from one must skip none of them.
	for _, limit := range []int{0, 37, 1000} {
		entries, err := listAll(e.ctx, e.b, base, bucket.ListOptions{Limit: limit})
		if err != nil {
			return err
		}
		if err := sameKeySet(fmt.Sprintf("List %s limit %d", base, limit), entries, keys); err != nil {
			return err
		}
		for _, en := range entries {
			if en.Size != int64(len(en.Key)) {
				return fmt.Errorf("List shows %s with size %d, want %d", en.Key, en.Size, len(en.Key))
			}
		}
	}
	// Small pages under a prefix that ends inside a segment ("d-/" and
	// leaves starting "d-", a fifth of the keys).
	sub := base + "d-"
	entries, err := listAll(e.ctx, e.b, sub, bucket.ListOptions{Limit: 7})
	if err != nil {
		return err
	}
	if err := sameKeySet("List "+sub+" limit 7", entries, under(keys, sub)); err != nil {
		return err
	}
	none := e.key("none/")
	page, err := e.b.List(e.ctx, none, bucket.ListOptions{})
	if err != nil {
		return fmt.Errorf("List %s: %w", none, err)
	}
	if len(page.Entries) != 0 || page.Next != "" {
		return fmt.Errorf("List %s (nothing there): %d entries, next %q", none, len(page.Entries), page.Next)
	}
	return nil
}

// listByteOrder is the capability: a listing in byte order throughout,
// and StartAfter anywhere counted in it. A store that walks directories
// (MinIO) lists d/x before d-/x.
func listByteOrder(e *env) error {
	base := e.key("keys/")
	keys := listKeys(base, 60)
	for _, k := range kernelKeyNames {
		if strings.HasPrefix(k, "order/") {
			keys = append(keys, base+k)
		}
	}
	if err := e.putAll(keys); err != nil {
		return err
	}
	slices.Sort(keys)
	n := len(keys)
	for _, c := range []struct {
		after string
		limit int
	}{{"", 0}, {"", 7}, {keys[n/2], 0}, {keys[n/3] + "%", 5}, {base + "d/", 0}, {base + "d-", 0}, {base + "order/b", 3}, {base + "~~~~", 0}} {
		entries, err := listAll(e.ctx, e.b, base, bucket.ListOptions{StartAfter: c.after, Limit: c.limit})
		if err != nil {
			return err
		}
		want := keys[:0:0]
		for _, k := range keys {
			if k > c.after {
				want = append(want, k)
			}
		}
		if err := sameKeys(fmt.Sprintf("List %s after %q limit %d", base, c.after, c.limit), entries, want); err != nil {
			return err
		}
	}
	return nil
}

// putAll creates keys, each holding its own name, Writers at a time.
func (e *env) putAll(keys []string) error {
	work := make(chan string)
	errs := make(chan error, e.opts.Writers)
	var wg sync.WaitGroup
	for range e.opts.Writers {
		wg.Go(func() {
			for k := range work {
				if _, err := e.put(k, []byte(k), create); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for _, k := range keys {
		select {
		case work <- k:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

func emptyObject(e *env) error {
	k := e.key("empty")
	v, err := e.put(k, nil, create)
	if err != nil {
		return err
	}
	got, obj, err := e.get(k, bucket.GetOptions{})
	if err != nil {
		return err
	}
	if len(got) != 0 || obj.Size != 0 {
		return fmt.Errorf("Get %s: %d bytes, size %d, want 0", k, len(got), obj.Size)
	}
	_, err = e.b.Get(e.ctx, k, bucket.GetOptions{Length: 1})
	if err := is(err, bucket.ErrRange, "Get "+k+" {Length: 1} of a 0-byte object"); err != nil {
		return err
	}
	en, err := e.entry(k)
	if err != nil {
		return err
	}
	if en.Size != 0 {
		return fmt.Errorf("List shows %s with size %d, want 0", k, en.Size)
	}
	// Replaced by content, then by emptiness again: the two empty objects
	// may share a version (an ETag hashes the bytes), the full one not.
	full, err := e.put(k, []byte("full"), at(v))
	if err != nil {
		return err
	}
	_, err = e.b.Put(e.ctx, k, strings.NewReader(""), 0, at(v))
	if err := is(err, bucket.ErrPrecondition, "an empty replace of "+k+" at a stale version"); err != nil {
		return err
	}
	if _, err := e.put(k, nil, at(full)); err != nil {
		return err
	}
	return e.holds(k, nil)
}

func largeObject(e *env) error {
	k, size := e.key("large"), e.opts.LargeSize
	want, _, _ := digest(stream(3, size))
	if _, err := e.b.Put(e.ctx, k, onlyReader{stream(3, size)}, size, create); err != nil {
		return fmt.Errorf("Put %s of %d bytes: %w", k, size, err)
	}
	// The tail range starts inside the object and runs past its end.
	tail := size / 4
	for _, opts := range []bucket.GetOptions{{}, {Offset: size - tail, Length: tail + 1}} {
		obj, err := e.b.Get(e.ctx, k, opts)
		if err != nil {
			return fmt.Errorf("Get %s %+v: %w", k, opts, err)
		}
		got, n, err := digest(obj.Body)
		obj.Body.Close()
		if err != nil {
			return fmt.Errorf("Get %s %+v: reading: %w", k, opts, err)
		}
		exp, expN := want, size
		if opts.Offset > 0 {
			r := stream(3, size)
			io.CopyN(io.Discard, r, opts.Offset)
			exp, expN, _ = digest(r)
		}
		if obj.Size != size || n != expN || !bytes.Equal(got, exp) {
			return fmt.Errorf("Get %s %+v: %d bytes (size %d), want %d bytes (size %d) with the SHA-256 written", k, opts, n, obj.Size, expN, size)
		}
	}
	en, err := e.entry(k)
	if err != nil {
		return err
	}
	if en.Size != size {
		return fmt.Errorf("List shows %s with size %d, want %d", k, en.Size, size)
	}
	return nil
}

func bodySize(e *env) error {
	k, kept := e.key("object"), e.key("kept")
	for _, c := range []struct {
		body string
		size int64
	}{{"short", 10}, {"longer than declared", 5}} {
		if _, err := e.b.Put(e.ctx, k, onlyReader{strings.NewReader(c.body)}, c.size, create); err == nil {
			return fmt.Errorf("Put %s with %d bytes declared as %d succeeded", k, len(c.body), c.size)
		}
		_, err := e.b.Get(e.ctx, k, bucket.GetOptions{})
		if err := is(err, bucket.ErrNotFound, fmt.Sprintf("Get %s after a Put of %d bytes declared as %d", k, len(c.body), c.size)); err != nil {
			return err
		}
	}
	v, err := e.put(kept, []byte("kept"), create)
	if err != nil {
		return err
	}
	if _, err := e.b.Put(e.ctx, kept, onlyReader{strings.NewReader("short")}, 10, at(v)); err == nil {
		return fmt.Errorf("a replace of %s with 5 bytes declared as 10 succeeded", kept)
	}
	return e.holds(kept, []byte("kept"))
}

// race has Writers writers put to key under cond at once, and checks that
// exactly one wins and the others get ErrPrecondition. It returns the
// winner's version.
func (e *env) race(round int, key string, cond bucket.Condition) (bucket.Version, error) {
	n := e.opts.Writers
	versions := make([]bucket.Version, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			body := fmt.Sprintf("round %d writer %d", round, w)
			<-start
			versions[w], errs[w] = e.b.Put(e.ctx, key, strings.NewReader(body), int64(len(body)), cond)
		})
	}
	close(start)
	wg.Wait()
	var winners []int
	for w, err := range errs {
		if err == nil {
			winners = append(winners, w)
			continue
		}
		if err := is(err, bucket.ErrPrecondition, fmt.Sprintf("round %d: writer %d's Put %s %s", round, w, key, describe(cond))); err != nil {
			return "", err
		}
	}
	if len(winners) != 1 {
		return "", fmt.Errorf("round %d: %d of %d writers' Put %s %s succeeded (writers %v), want exactly 1", round, len(winners), n, key, describe(cond), winners)
	}
	w := winners[0]
	if err := e.holds(key, fmt.Appendf(nil, "round %d writer %d", round, w)); err != nil {
		return "", fmt.Errorf("round %d: the winner was writer %d, but %w", round, w, err)
	}
	return versions[w], nil
}

func raceCreate(e *env) error {
	for round := range e.opts.Rounds {
		if _, err := e.race(round, e.key(fmt.Sprintf("create-%d", round)), create); err != nil {
			return err
		}
	}
	return nil
}

func raceReplace(e *env) error {
	k := e.key("object")
	v, err := e.put(k, []byte("start"), create)
	if err != nil {
		return err
	}
	for round := range e.opts.Rounds {
		if v, err = e.race(round, k, at(v)); err != nil {
			return err
		}
	}
	return nil
}

// getDuringReplace replaces one object again and again, each write
// conditioned on the last, while readers Get it. A read that pairs an
// earlier write's body with a later write's version would let its reader
// replace, at that version, what it never read: two nodes then each win
// one ownership record (VersityGW's posix --sidecar stored the new ETag
// before the new body, and Gets read the two unlocked). The version a Get
// gives for each write is learned by the writer's own Get after it, while
// only readers run; the readers' pairs are judged against those at the end.
func getDuringReplace(e *env) error {
	k := e.key("object")
	v, err := e.put(k, []byte("write 0"), create)
	if err != nil {
		return err
	}
	type read struct {
		write   int
		version bucket.Version
	}
	var (
		mu      sync.Mutex
		reads   []read
		readErr error
		wg      sync.WaitGroup
		done    = make(chan struct{})
	)
	for range replaceReaders {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				data, obj, err := e.get(k, bucket.GetOptions{})
				var w int
				if err == nil {
					if _, serr := fmt.Sscanf(string(data), "write %d", &w); serr != nil {
						err = fmt.Errorf("Get %s read %s, which no Put wrote", k, quote(data))
					}
				}
				mu.Lock()
				if err != nil {
					readErr = cmp.Or(readErr, err)
				} else {
					reads = append(reads, read{w, obj.Version})
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	writeOf := map[bucket.Version]int{} // a Get's version of each write
	err = func() error {
		for w := 1; w <= replaces(e.opts); w++ {
			if v, err = e.put(k, fmt.Appendf(nil, "write %d", w), at(v)); err != nil {
				return err
			}
			data, obj, err := e.get(k, bucket.GetOptions{})
			if err != nil {
				return err
			}
			if string(data) != fmt.Sprintf("write %d", w) {
				return fmt.Errorf("Get %s after write %d read %s", k, w, quote(data))
			}
			writeOf[obj.Version] = w
		}
		return nil
	}()
	close(done)
	wg.Wait()
	if err = cmp.Or(err, readErr); err != nil {
		return err
	}
	torn := 0
	var first string
	for _, r := range reads {
		if w, ok := writeOf[r.version]; ok && w > r.write {
			if torn++; torn == 1 {
				first = fmt.Sprintf("write %d's body with write %d's version %s", r.write, w, r.version)
			}
		}
	}
	if torn > 0 {
		return fmt.Errorf("%d of %d Gets racing %d replaces read an earlier write's body with a later write's version, first %s", torn, len(reads), replaces(e.opts), first)
	}
	return nil
}

func probe(e *env) error { return bucket.Probe(e.ctx, e.b) }
