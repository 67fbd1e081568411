package kv

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// FNV-1a 64's published vectors, and the shards they pick: every SDK must
// agree on both.
func TestHash(t *testing.T) {
	for _, c := range []struct {
		key  string
		hash uint64
	}{
		{"", 0xcbf29ce484222325},
		{"a", 0xaf63dc4c8601ec8c},
		{"foobar", 0x85944171f73967e8},
		{"user:42", 0x6c151ea4dcd221c2}, // checked against hash/fnv
	} {
		if got := fnv1a(c.key); got != c.hash {
			t.Errorf("fnv1a(%q) = %#x, want %#x", c.key, got, c.hash)
		}
		if got := ShardOf(c.key, 8); got != int(c.hash%8) {
			t.Errorf("ShardOf(%q, 8) = %d", c.key, got)
		}
	}
	if got := New("kv", 8).Shard("a"); got != "kv/shard-4" { // 0xaf63dc4c8601ec8c % 8
		t.Errorf("Shard(a) = %q", got)
	}
}

func TestMergeKeys(t *testing.T) {
	pages := [][]string{{"a", "c", "\xff"}, {}, {"b", "é", "d"[:1]}, {"A"}}
	slices.Sort(pages[2])
	got := mergeKeys(pages, 5)
	want := []string{"A", "a", "b", "c", "d"}
	if !slices.Equal(got, want) {
		t.Errorf("merge: %q, want %q", got, want)
	}
	if got := mergeKeys(pages, 100); len(got) != 7 || got[5] != "é" || got[6] != "\xff" {
		t.Errorf("merge, all: %q (byte order puts é before 0xff)", got)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"user:", "user;", true},
		{"a\xff", "b", true},
		{"\xff\xff", "", false},
	} {
		end, ok := prefixEnd([]byte(c.prefix))
		if ok != c.ok || string(end) != c.end {
			t.Errorf("prefixEnd(%q) = %q, %v", c.prefix, end, ok)
		}
	}
}

// The encoding, byte for byte: docs/sdk-protocols.md gives these layouts.
func TestEncoding(t *testing.T) {
	put := encodePut("k", []byte("v"), PutOptions{Local: true, TTLMs: 5, Expect: Version(7)})
	want := []byte{1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v', 2, 7, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1}
	if !bytes.Equal(put, want) {
		t.Errorf("put: % x\nwant % x", put, want)
	}
	q, err := decodePut(put)
	if err != nil || string(q.key) != "k" || string(q.value) != "v" || q.expect != Version(7) || q.ttlMs != 5 || q.flags != flagLocal {
		t.Errorf("put round trip: %+v %v", q, err)
	}
	if _, err := decodePut(append(put, 0)); err == nil {
		t.Error("trailing bytes accepted")
	}
	if _, err := decodePut(put[:len(put)-1]); err == nil {
		t.Error("a short body accepted")
	}
	if _, err := decodeDelete(encodeDelete("k", Expect{kind: 3})); err != errBadExpect {
		t.Errorf("an unknown expectation: %v", err)
	}

	after := "p:1"
	l, err := decodeList(encodeList("p:", &after, 10))
	if err != nil || string(l.prefix) != "p:" || !l.hasAfter || string(l.after) != "p:1" || l.limit != 10 {
		t.Errorf("list round trip: %+v %v", l, err)
	}
	if l, _ := decodeList(encodeList("", nil, 1)); l.hasAfter {
		t.Error("list without after has one")
	}
	d, err := decodeDelete(encodeDelete("k", Absent()))
	if err != nil || string(d.key) != "k" || d.expect != Absent() {
		t.Errorf("delete round trip: %+v %v", d, err)
	}

	e, err := decodeEntry(encodeEntry(&Entry{Value: []byte("x"), Version: 3, ExpiresAt: 9}))
	if err != nil || string(e.Value) != "x" || e.Version != 3 || e.ExpiresAt != 9 {
		t.Errorf("entry round trip: %+v %v", e, err)
	}
	if e, err := decodeEntry(encodeEntry(nil)); e != nil || err != nil {
		t.Errorf("absent entry: %+v %v", e, err)
	}
	keys, err := decodeKeys(encodeKeys([][]byte{[]byte("a"), {}, []byte("b")}))
	if err != nil || !slices.Equal(keys, []string{"a", "", "b"}) {
		t.Errorf("keys round trip: %q %v", keys, err)
	}
	if _, err := decodeKeys(abi.AppendU32(nil, 1<<30)); err == nil {
		t.Error("a huge count accepted")
	}
}

// fakeShards answers the client's calls from memory, as the shard class
// does, counting calls.
type fakeShards struct {
	rows  map[string]*Entry
	seq   uint64
	calls []string
	fail  error // the next call fails with it
	reply *wasmkeep.Response
}

func (f *fakeShards) call(address string, r *wasmkeep.Request) (*wasmkeep.Response, error) {
	f.calls = append(f.calls, address+" "+r.URL.Path)
	if err := f.fail; err != nil {
		f.fail = nil
		return nil, err
	}
	if f.reply != nil {
		return f.reply, nil
	}
	ok := func(b []byte) (*wasmkeep.Response, error) { return &wasmkeep.Response{StatusCode: 200, Body: b}, nil }
	switch r.URL.Path {
	case pathGet:
		q, _ := decodeGet(r.Body)
		return ok(encodeEntry(f.rows[string(q.key)]))
	case pathPut:
		q, _ := decodePut(r.Body)
		cur := f.rows[string(q.key)]
		if !q.expect.holds(cur != nil, version(cur)) {
			return &wasmkeep.Response{StatusCode: 409, Body: []byte("conflict\n")}, nil
		}
		f.seq++
		f.rows[string(q.key)] = &Entry{Value: q.value, Version: f.seq}
		return ok(encodeVersion(f.seq))
	case pathDelete:
		q, _ := decodeDelete(r.Body)
		cur := f.rows[string(q.key)]
		delete(f.rows, string(q.key))
		return ok(encodeBool(cur != nil))
	}
	return &wasmkeep.Response{StatusCode: 404, Body: []byte("no such path\n")}, nil
}

func version(e *Entry) uint64 {
	if e == nil {
		return 0
	}
	return e.Version
}

func fakeClient(shards int) (*Client, *fakeShards, *int64) {
	f := &fakeShards{rows: map[string]*Entry{}}
	now := new(int64)
	c := New("kv", shards)
	c.call, c.now = f.call, func() int64 { return *now }
	return c, f, now
}

func TestClientErrors(t *testing.T) {
	c, f, _ := fakeClient(2)
	long := strings.Repeat("x", MaxKeyLen+1)
	if _, err := c.Get(long); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("get of a long key: %v", err)
	}
	if _, err := c.Put(long, nil); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("put of a long key: %v", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("calls made for too long a key: %q", f.calls)
	}
	v, err := c.CompareAndSet("k", Absent(), []byte("1"))
	if err != nil || v != 1 {
		t.Fatalf("cas absent: %d %v", v, err)
	}
	_, err = c.CompareAndSet("k", Absent(), []byte("2"))
	var e *Error
	if !errors.Is(err, ErrConflict) || !errors.As(err, &e) || e.Message != "conflict" || err.Error() != "kv conflict: conflict" {
		t.Errorf("cas conflict: %v", err)
	}
	f.fail = &wasmkeep.CallError{Kind: wasmkeep.CallTimeout}
	if _, err := c.Put("k", nil); !errors.Is(err, ErrCall) {
		t.Errorf("a failed call: %v", err)
	}
	f.reply = &wasmkeep.Response{StatusCode: 403, Body: []byte("forbidden\n")}
	if _, err := c.Get("k"); !errors.As(err, &e) || e.Kind != Refused || e.Status != 403 || err.Error() != "kv refused (403): forbidden" {
		t.Errorf("a 403: %v", err)
	}
	f.reply = &wasmkeep.Response{StatusCode: 500, Body: []byte("disk full")}
	if _, err := c.Get("k"); !errors.Is(err, ErrStorage) {
		t.Errorf("a 500: %v", err)
	}
	f.reply = &wasmkeep.Response{StatusCode: 200, Body: []byte{1, 2}}
	if _, err := c.Get("k"); !errors.As(err, &e) || e.Kind != Refused || e.Status != 200 {
		t.Errorf("a malformed reply: %v", err)
	}
}

// The read cache: served until its age, updated by the client's own
// writes, skipped by GetFresh, absent values cached too.
func TestReadCache(t *testing.T) {
	c, f, now := fakeClient(1)
	cached := c.WithReadCache(100)
	if _, err := cached.Put("k", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	f.rows["k"] = &Entry{Value: []byte("theirs"), Version: 9}
	calls := len(f.calls)
	if e, _ := cached.Get("k"); string(e.Value) != "mine" || len(f.calls) != calls {
		t.Errorf("get after own put: %+v, %d calls", e, len(f.calls)-calls)
	}
	if e, _ := c.Get("k"); string(e.Value) != "theirs" {
		t.Errorf("the client without cache: %+v", e)
	}
	*now = 100
	if e, _ := cached.Get("k"); string(e.Value) != "mine" {
		t.Errorf("at the cache's age: %+v", e)
	}
	*now = 101
	if e, _ := cached.Get("k"); string(e.Value) != "theirs" {
		t.Errorf("past the cache's age: %+v", e)
	}
	f.rows["k"] = &Entry{Value: []byte("third"), Version: 10}
	if e, _ := cached.Get("k"); string(e.Value) != "theirs" {
		t.Errorf("cached again: %+v", e)
	}
	if e, _ := cached.GetFresh("k"); string(e.Value) != "third" {
		t.Errorf("fresh: %+v", e)
	}
	if _, err := cached.Delete("k"); err != nil {
		t.Fatal(err)
	}
	f.rows["k"] = &Entry{Value: []byte("fourth"), Version: 11}
	if e, _ := cached.Get("k"); e != nil {
		t.Errorf("after own delete: %+v", e)
	}
	f.fail = errors.New("lost")
	cached.Put("k", []byte("maybe"))
	if e, _ := cached.Get("k"); string(e.Value) != "fourth" {
		t.Errorf("after a failed put the cache must be dropped: %+v", e)
	}
	if _, err := cached.PutWith("t", []byte("x"), PutOptions{TTLMs: 5}); err != nil {
		t.Fatal(err)
	}
	*now += 5
	if e, _ := cached.Get("t"); e != nil {
		t.Errorf("an expired cached entry: %+v", e)
	}
}
