package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

var shop = Place{Prefix: "prod", App: app.Name{Tenant: "acme", App: "shop"}}

// The values every test sets: none may appear in an error or printed form.
const (
	token = "sk_live_TOKEN_VALUE"
	pem   = "-----BEGIN KEY-----\nPEM_VALUE\n-----END KEY-----\n"
)

func newBucket() *buckettest.Memory { return buckettest.NewMemory(buckettest.Flaws{}) }

func testKey(t *testing.T, fill byte) Key {
	t.Helper()
	k, err := ParseKey("test", []byte(strings.Repeat(string("0123456789abcdef"[fill%16]), 64)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// noValue fails the test if err (or anything printed) holds a value.
func noValue(t *testing.T, what string, s string) {
	t.Helper()
	for _, v := range []string{token, "PEM_VALUE", "other-value"} {
		if strings.Contains(s, v) {
			t.Errorf("%s holds a value: %s", what, s)
		}
	}
}

func put(class, name, value string) func(*Set) error {
	return func(s *Set) error { return s.Put(class, name, value) }
}

func write(t *testing.T, b bucket.Bucket, p Place, c Change) Result {
	t.Helper()
	r, err := Write(t.Context(), b, p, c)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return r
}

func read(t *testing.T, b bucket.Bucket, p Place, keys ...Key) Current {
	t.Helper()
	c, err := Read(t.Context(), b, p, keys)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	b, k := newBucket(), testKey(t, 1)
	if c := read(t, b, shop, k); c.Seq != 0 || c.Set.Len() != 0 {
		t.Fatalf("no secrets yet: %+v", c)
	}
	r := write(t, b, shop, Change{Seal: k, Apply: func(s *Set) error {
		if err := s.Put("api", "TOKEN", token); err != nil {
			return err
		}
		return s.Put("api", "PEM", pem)
	}})
	if r.From != 0 || r.To != 1 {
		t.Fatalf("first change: %+v", r)
	}
	write(t, b, shop, Change{Seal: k, Apply: put("hub", "EMPTY", "")})
	c := read(t, b, shop, k)
	if v, _ := c.Set.Value("api", "PEM"); c.Seq != 2 || v != pem || c.KeyID != k.ID() {
		t.Fatalf("read back: seq %d, key %s, %v", c.Seq, c.KeyID, c.Set)
	}
	if v, ok := c.Set.Value("hub", "EMPTY"); !ok || v != "" {
		t.Error("an empty value is set")
	}
	if got := c.Set.Names(); !slices.Equal(got, []Name{{"api", "PEM"}, {"api", "TOKEN"}, {"hub", "EMPTY"}}) {
		t.Errorf("names %v", got)
	}
	noValue(t, "a printed set", c.Set.String()+" "+c.Set.GoString())
	// A bucket reader sees no name or value.
	data := objectText(t, b, "apps/acme/shop/secrets/0000000000000002")
	for _, s := range []string{"TOKEN", "PEM", "EMPTY", token} {
		if strings.Contains(data, s) {
			t.Errorf("the sealed object shows %q", s)
		}
	}
	if cur := objectText(t, b, "apps/acme/shop/secrets/current"); cur != "0000000000000002\n" {
		t.Errorf("current %q", cur)
	}
	// The same set again writes nothing.
	if r := write(t, b, shop, Change{Seal: k, Apply: put("hub", "EMPTY", "")}); !r.NoOp || r.To != 2 {
		t.Errorf("an unchanged set: %+v", r)
	}
	// Unset of several names is one change.
	write(t, b, shop, Change{Seal: k, Apply: func(s *Set) error { s.Delete("api", "PEM"); s.Delete("api", "TOKEN"); return nil }})
	if c := read(t, b, shop, k); c.Seq != 3 || !slices.Equal(c.Set.Names(), []Name{{"hub", "EMPTY"}}) {
		t.Errorf("after unset: %d %v", c.Seq, c.Set)
	}
}

func objectText(t *testing.T, b bucket.Bucket, key string) string {
	t.Helper()
	o, err := b.Get(t.Context(), key, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Body.Close()
	data, _ := io.ReadAll(o.Body)
	return string(data)
}

func putObject(t *testing.T, b bucket.Bucket, key, data string) {
	t.Helper()
	if _, err := b.Put(t.Context(), key, strings.NewReader(data), int64(len(data)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// Each refusal names what is wrong, and no value.
func TestRefusals(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	setUp := func() *buckettest.Memory {
		b := newBucket()
		write(t, b, shop, Change{Seal: k, Apply: put("api", "TOKEN", token)})
		return b
	}
	const obj = "apps/acme/shop/secrets/0000000000000001"
	for _, c := range []struct {
		name  string
		alter func(b *buckettest.Memory)
		keys  []Key
		want  error
		say   string
	}{
		{"no key", nil, nil, ErrNoKey, k.ID()},
		{"another key", nil, []Key{other}, ErrOtherKey, k.ID()},
		{"a flipped byte", func(b *buckettest.Memory) {
			s := []byte(objectText(t, b, obj))
			i := len(s) - 3 // a hex digit of the tag, changed to another
			s[i] = map[bool]byte{true: '1', false: '0'}[s[i] == '0']
			putObject(t, b, obj, string(s))
		}, []Key{k}, ErrAltered, "does not open"},
		{"a truncated object", func(b *buckettest.Memory) { putObject(t, b, obj, objectText(t, b, obj)[:100]) }, []Key{k}, ErrAltered, obj},
		{"an oversized object", func(b *buckettest.Memory) { putObject(t, b, obj, strings.Repeat("x", maxObject+1)) }, []Key{k}, ErrAltered, "refused unread"},
		{"a missing object", func(b *buckettest.Memory) { b.Delete(t.Context(), obj, bucket.Condition{}) }, []Key{k}, ErrMissing, obj},
		{"a header moved from another app", func(b *buckettest.Memory) {
			s := strings.Replace(objectText(t, b, obj), "/apps/acme/shop/", "/apps/acme/shoq/", 1)
			putObject(t, b, obj, s)
		}, []Key{k}, ErrOtherPlace, "prod/apps/acme/shoq/secrets/0000000000000001"},
		{"a header naming a place of 1000 bytes", func(b *buckettest.Memory) {
			s := strings.Replace(objectText(t, b, obj), "/apps/acme/shop/", "/apps/acme/"+strings.Repeat("q", 1000)+"/", 1)
			putObject(t, b, obj, s)
		}, []Key{k}, ErrOtherPlace, "(cut, 1040 bytes in all)"},
	} {
		b := setUp()
		if c.alter != nil {
			c.alter(b)
		}
		_, err := Read(t.Context(), b, shop, c.keys)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.want, c.say)
		}
		if err != nil {
			noValue(t, c.name, err.Error())
			if len(err.Error()) > 600 {
				t.Errorf("%s: an error of %d bytes; a header line is quoted to 200", c.name, len(err.Error()))
			}
		}
	}
}

// An object copied to another app, prefix or seq does not open, even with
// its header rewritten to match: the associated data binds the place.
func TestCopiedObjectRefused(t *testing.T) {
	k := testKey(t, 1)
	src := newBucket()
	write(t, src, shop, Change{Seal: k, Apply: put("api", "TOKEN", token)})
	sealedObj := objectText(t, src, "apps/acme/shop/secrets/0000000000000001")
	for _, c := range []struct {
		name string
		to   Place
		seq  uint64
	}{
		{"another app", Place{Prefix: "prod", App: app.Name{Tenant: "acme", App: "shop2"}}, 1},
		{"another tenant", Place{Prefix: "prod", App: app.Name{Tenant: "acmf", App: "shop"}}, 1},
		{"the split moved", Place{Prefix: "prod", App: app.Name{Tenant: "acmes", App: "hop"}}, 1},
		{"another prefix", Place{Prefix: "staging", App: shop.App}, 1},
		{"no prefix", Place{App: shop.App}, 1},
		{"another seq", shop, 2},
	} {
		for _, rewrite := range []bool{false, true} {
			b := newBucket()
			data := sealedObj
			if rewrite {
				data = strings.Replace(data, shop.location(1), c.to.location(c.seq), 1)
			}
			putObject(t, b, c.to.objectKey(c.seq), data)
			putObject(t, b, c.to.currentKey(), seqName(c.seq)+"\n")
			_, err := Read(t.Context(), b, c.to, []Key{k})
			want := ErrOtherPlace
			if rewrite {
				want = ErrAltered
			}
			if !errors.Is(err, want) {
				t.Errorf("%s (header rewritten %v): %v; want %v", c.name, rewrite, err, want)
			}
		}
	}
}

// Two writers from the same current: both changes land, one after the
// other; neither is lost.
func TestConcurrentWriters(t *testing.T) {
	k := testKey(t, 1)
	mem := newBucket()
	write(t, mem, shop, Change{Seal: k, Apply: put("api", "A", "1")})
	b := &racing{Memory: mem}
	b.race = func() { write(t, mem, shop, Change{Seal: k, Apply: put("api", "B", "2")}) }
	r := write(t, b, shop, Change{Seal: k, Apply: put("api", "C", "3")})
	// Its first object (2) is skipped over: the racer took 3.
	if r.Retries != 1 || r.From != 3 || r.To != 4 {
		t.Fatalf("the racing writer: %+v", r)
	}
	c := read(t, mem, shop, k)
	if !slices.Equal(c.Set.Names(), []Name{{"api", "A"}, {"api", "B"}, {"api", "C"}}) {
		t.Errorf("after the race: %v", c.Set)
	}
	// A writer that always loses gives up, naming the conflict.
	b.race = func() {}
	b.always = func() {
		write(t, mem, shop, Change{Seal: k, Apply: func(s *Set) error { return s.Put("api", "N", time.Now().String()) }})
	}
	if _, err := Write(t.Context(), b, shop, Change{Seal: k, Apply: put("api", "D", "4")}); !errors.Is(err, ErrConflict) {
		t.Errorf("always racing: %v", err)
	}
	// An object a writer left without moving current is skipped over.
	putObject(t, mem, shop.objectKey(100), "left")
	if r := write(t, mem, shop, Change{Seal: k, Apply: put("api", "E", "5")}); r.To != 101 {
		t.Errorf("past a left object: %+v", r)
	}
}

// racing runs another change just before a write of current: race once,
// always before every one.
type racing struct {
	*buckettest.Memory
	race, always func()
}

func (r *racing) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if strings.HasSuffix(key, "/current") {
		if race := r.race; race != nil {
			r.race = nil
			race()
		}
		if r.always != nil {
			r.always()
		}
	}
	return r.Memory.Put(ctx, key, body, size, cond)
}

// The first change of two writers: IfAbsent decides, the loser retries on
// the winner's set.
func TestConcurrentFirstWriters(t *testing.T) {
	k := testKey(t, 1)
	mem := newBucket()
	b := &racing{Memory: mem}
	b.race = func() { write(t, mem, shop, Change{Seal: k, Apply: put("api", "B", "2")}) }
	r := write(t, b, shop, Change{Seal: k, Apply: put("api", "A", "1")})
	if r.Retries != 1 || r.From != 2 || r.To != 3 {
		t.Fatalf("the losing first writer: %+v", r)
	}
	if c := read(t, mem, shop, k); c.Set.Len() != 2 {
		t.Errorf("after the race: %v", c.Set)
	}
}

// Rotation: every node holding both keys reads every set on the way;
// sealing under the new key needs NodesHaveKey, and so does a set or unset
// sealed with a key the current set is not sealed under.
func TestRotation(t *testing.T) {
	old, nu := testKey(t, 1), testKey(t, 2)
	b := newBucket()
	write(t, b, shop, Change{Seal: old, Apply: put("api", "TOKEN", token)})
	both := []Key{old, nu}
	rotate := Change{Seal: nu, Open: []Key{old}, Apply: func(*Set) error { return nil }}
	if _, err := Write(t.Context(), b, shop, rotate); !errors.Is(err, ErrNodesNeedKey) {
		t.Fatalf("rotating without NodesHaveKey: %v", err)
	}
	if c := read(t, b, shop, both...); c.Seq != 1 || c.KeyID != old.ID() {
		t.Fatalf("a refused rotation wrote: %+v", c)
	}
	rotate.NodesHaveKey = true
	if r := write(t, b, shop, rotate); r.To != 2 || r.NoOp {
		t.Fatalf("rotate: %+v", r)
	}
	c := read(t, b, shop, both...)
	if v, _ := c.Set.Value("api", "TOKEN"); c.KeyID != nu.ID() || v != token {
		t.Fatalf("after rotation: key %s", c.KeyID)
	}
	if _, err := Read(t.Context(), b, shop, []Key{nu}); err != nil {
		t.Errorf("the new key alone: %v", err)
	}
	if _, err := Read(t.Context(), b, shop, []Key{old}); !errors.Is(err, ErrOtherKey) {
		t.Errorf("the old key alone after rotation: %v", err)
	}
	// A set sealed with the old key again needs the flag too.
	if _, err := Write(t.Context(), b, shop, Change{Seal: old, Open: []Key{nu}, Apply: put("api", "X", "1")}); !errors.Is(err, ErrNodesNeedKey) {
		t.Errorf("back to the old key without the flag: %v", err)
	}
	// With the key current is sealed under, no flag.
	write(t, b, shop, Change{Seal: nu, Open: []Key{old}, Apply: put("api", "X", "1")})
}

// Reset writes a whole set without opening current: the lost key is not
// needed, a corrupt current is replaced, and it needs NodesHaveKey.
func TestReset(t *testing.T) {
	lost, nu := testKey(t, 1), testKey(t, 2)
	b := newBucket()
	write(t, b, shop, Change{Seal: lost, Apply: put("api", "TOKEN", token)})
	putObject(t, b, shop.currentKey(), "junk")
	if _, err := Read(t.Context(), b, shop, []Key{lost}); !errors.Is(err, ErrCorruptCurrent) {
		t.Fatalf("a corrupt current: %v", err)
	}
	var fresh Set
	if err := fresh.Put("api", "TOKEN", "other-value"); err != nil {
		t.Fatal(err)
	}
	reset := Change{Seal: nu, Reset: true, Apply: func(s *Set) error { *s = fresh.Clone(); return nil }}
	if _, err := Write(t.Context(), b, shop, reset); !errors.Is(err, ErrNodesNeedKey) {
		t.Fatalf("reset without NodesHaveKey: %v", err)
	}
	reset.NodesHaveKey = true
	if r := write(t, b, shop, reset); r.To != 2 {
		t.Fatalf("reset: %+v", r)
	}
	c := read(t, b, shop, nu)
	if v, _ := c.Set.Value("api", "TOKEN"); v != "other-value" || c.Seq != 2 {
		t.Errorf("after reset: seq %d", c.Seq)
	}
}

func TestPlaintext(t *testing.T) {
	var s Set
	all := string(bytes.Repeat([]byte{'\n', '\t', ' ', 'x', 0x7f, 0}, 3)) + "é\r\n"
	for _, e := range []struct{ c, n, v string }{{"api", "A", all}, {"api", "_B2", ""}, {"hub-2", "C", "3 4\n5"}} {
		if err := s.Put(e.c, e.n, e.v); err != nil {
			t.Fatal(err)
		}
	}
	data, err := s.Plaintext()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePlaintext("f", data)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := back.Plaintext(); !bytes.Equal(again, data) {
		t.Errorf("round trip:\n%q\n%q", again, data)
	}
	for in, want := range map[string]string{
		"api TOKEN 3\nabc":                       "entry 1: the value is not 3 bytes followed by a newline",
		"api TOKEN x\nabc\n":                     "not a decimal",
		"api TOKEN 03\nab\n":                     "not a decimal",
		"api TOKEN\n":                            "entry 1: its first line",
		"api T 1\na\napi T 1\nb\n":               "entry 2: given twice",
		"API T 1\na\n":                           "entry 1: a class name must match",
		"api " + token + "=x 1\na\n":             "entry 1: a name is letters",
		"api T 2\n\xff\xfe\n":                    "not UTF-8",
		"api T 1\na\n" + token + "-x a 1\n":      "entry 2: a class name must",
		"api T 1\na\nxx sk-" + token + " 1\na\n": "entry 2: a name",
		// A wrong length (1 for "a\nhunter2 swordfish 9\nzz") cuts a
		// header from inside the value: its fields are not named.
		"api T 1\na\nhunter2 swordfish 9\nzz\n": "entry 2: the value is not 9 bytes",
	} {
		_, err := ParsePlaintext("f", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePlaintext(%q) = %v; want %q", in, err, want)
		} else {
			noValue(t, "a parse error", err.Error())
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "swordfish") {
				t.Errorf("ParsePlaintext(%q) = %v: names fields cut from a value", in, err)
			}
		}
	}
	big := strings.Repeat("x", MaxPlaintext)
	var huge Set
	huge.Put("api", "A", big)
	if _, err := huge.Plaintext(); err == nil {
		t.Error("a set over MaxPlaintext is sealed")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	id, err := NewKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Errorf("new key mode %v", info.Mode())
	}
	k, err := LoadKeyFile(path)
	if err != nil || k.ID() != id || len(id) != 16 {
		t.Fatalf("LoadKeyFile: %v, id %q vs %q", err, k.ID(), id)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(k.String()+k.GoString(), strings.TrimSpace(string(data))) {
		t.Error("a printed key shows its bytes")
	}
	if _, err := NewKeyFile(path); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("over an existing file: %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		os.Chmod(path, mode)
		_, err := LoadKeyFile(path)
		if !errors.Is(err, ErrKeyFileMode) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("mode %04o", mode)) {
			t.Errorf("mode %v: %v", mode, err)
		}
	}
	link := filepath.Join(dir, "link")
	os.Symlink(path, link)
	if _, err := LoadKeyFile(link); !errors.Is(err, ErrKeyFileMode) {
		t.Errorf("a symlink to a 0644 file: %v", err)
	}
	os.Chmod(path, 0o400)
	if _, err := LoadKeyFile(link); err != nil {
		t.Errorf("a symlink to a 0400 file: %v", err)
	}
	for _, junk := range []string{"", strings.Repeat("a", 63), strings.Repeat("g", 64), strings.Repeat("a", 64) + "\n\n", " " + strings.Repeat("a", 64)} {
		if _, err := ParseKey("f", []byte(junk)); err == nil || strings.Contains(junk, "a") && strings.Contains(err.Error(), strings.Repeat("a", 32)) {
			t.Errorf("ParseKey(%q): %v", junk, err)
		}
	}
}

// Collect keeps current, the one before it and anything above it, and
// deletes older objects once their successor is older than the retention.
func TestCollect(t *testing.T) {
	k := testKey(t, 1)
	b := newBucket()
	for i := range 5 {
		write(t, b, shop, Change{Seal: k, Apply: put("api", "A", string(rune('a'+i)))})
	}
	putObject(t, b, shop.objectKey(9), "a writer's, not current yet")
	if got, err := Collect(t.Context(), b, shop, time.Hour, time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("within the retention: %v, %v", got, err)
	}
	got, err := Collect(t.Context(), b, shop, time.Hour, time.Now().Add(2*time.Hour))
	if err != nil || !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("Collect = %v, %v", got, err)
	}
	objs, _ := objects(t.Context(), b, shop)
	var left []uint64
	for _, o := range objs {
		left = append(left, o.seq)
	}
	if !slices.Equal(left, []uint64{4, 5, 9}) {
		t.Errorf("left %v", left)
	}
	if c := read(t, b, shop, k); c.Seq != 5 {
		t.Errorf("current %d", c.Seq)
	}
}
