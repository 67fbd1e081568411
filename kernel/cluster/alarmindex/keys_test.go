package alarmindex

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
)

func TestKeyFormat(t *testing.T) {
	a := history.Actor{Tenant: "acme", Class: "queue", Name: "jobs 1"}
	k, err := KeyFor(a, 1_764_950_400_123, Tag{Gen: 42, Nonce: 0xbeef})
	if err != nil {
		t.Fatal(err)
	}
	const want = "alarms/acme/001764950400123/queue.t/jobs%201/00000000000000000042-000000000000beef"
	if k.String() != want {
		t.Fatalf("key %q, want %q", k, want)
	}
	back, err := ParseKey(want)
	if err != nil || back != k {
		t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", want, back, err, k)
	}
	if got, hashed, err := k.Actor(); err != nil || hashed || got != a {
		t.Fatalf("Actor() = %v, %v, %v", got, hashed, err)
	}
	if k.Address() != "acme/queue/jobs%201" {
		t.Fatalf("address %q", k.Address())
	}
	// The widest values fit their fields.
	k, err = KeyFor(a, MaxAt, Tag{Gen: ^uint64(0), Nonce: ^uint64(0)})
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseKey(k.String()); err != nil || back != k {
		t.Fatalf("ParseKey(%q) = %+v, %v", k, back, err)
	}
}

// The name segment is the history's and the ownership record's encoding:
// the same actor has one segment in every family.
func TestNameSegmentIsTheHistorys(t *testing.T) {
	for _, name := range []string{"alice", "a b", "ünïcode", "%41", strings.Repeat("x", 256), strings.Repeat("é", 128)} {
		a := history.Actor{Tenant: "t", Class: "c", Name: name}
		k, err := KeyFor(a, 5, Tag{Gen: 1})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		p, err := history.Prefix(a)
		if err != nil {
			t.Fatal(err)
		}
		if want := "actors/t/c/" + k.Name + "/"; p != want {
			t.Fatalf("%q: segment %q, history's prefix %q", name, k.Name, p)
		}
	}
}

// The longest key fits under the longest app's state root.
func TestLongestKeyFitsUnderTheLongestRoot(t *testing.T) {
	id := "a" + strings.Repeat("b", 63)
	root := "state/" + id + "/" + id + "/"
	a := history.Actor{Tenant: id, Class: id, Name: strings.Repeat("é", 128)}
	k, err := KeyFor(a, MaxAt, Tag{Gen: ^uint64(0), Nonce: ^uint64(0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, hashed, _ := k.Actor(); !hashed {
		t.Fatal("a 256-byte name of escapes should be shortened")
	}
	if err := bucket.CheckKey(root + k.String()); err != nil {
		t.Fatal(err)
	}
}

func TestKeyForRefuses(t *testing.T) {
	for _, c := range []struct {
		a    history.Actor
		at   int64
		tag  Tag
		want string
	}{
		{history.Actor{Tenant: "T", Class: "c", Name: "n"}, 1, Tag{Gen: 1}, "tenant"},
		{history.Actor{Tenant: "t", Class: "c.x", Name: "n"}, 1, Tag{Gen: 1}, "class"},
		{history.Actor{Tenant: "t", Class: "c", Name: "a/b"}, 1, Tag{Gen: 1}, "actor name"},
		{history.Actor{Tenant: "t", Class: "c", Name: ""}, 1, Tag{Gen: 1}, "actor name"},
		{history.Actor{Tenant: "t", Class: "c", Name: "n"}, -1, Tag{Gen: 1}, "due time"},
		{history.Actor{Tenant: "t", Class: "c", Name: "n"}, MaxAt + 1, Tag{Gen: 1}, "due time"},
		{history.Actor{Tenant: "t", Class: "c", Name: "n"}, 1, Tag{Nonce: 1}, "generation 0"},
	} {
		if _, err := KeyFor(c.a, c.at, c.tag); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("KeyFor(%v, %d, %+v) = %v; want an error about %s", c.a, c.at, c.tag, err, c.want)
		}
	}
}

func TestParseKeyIsStrict(t *testing.T) {
	const tag = "00000000000000000001-0000000000000001"
	for _, c := range []struct{ key, want string }{
		{"actors/t/000000000000005/c.t/n/" + tag, "not under alarms/"},
		{"alarms/t/000000000000005/c.t/n", "segments"},
		{"alarms/t/000000000000005/c.t/n/" + tag + "/x", "segments"},
		{"alarms/T/000000000000005/c.t/n/" + tag, "tenant"},
		{"alarms/t/5/c.t/n/" + tag, "due time"},
		{"alarms/t/00000000000000a/c.t/n/" + tag, "due time"},
		{"alarms/t/-00000000000005/c.t/n/" + tag, "due time"},
		{"alarms/t/000000000000005/c/n/" + tag, "does not end in .t"},
		{"alarms/t/000000000000005/C.t/n/" + tag, "class"},
		{"alarms/t/000000000000005/c.t/a%2fb/" + tag, "name segment"},
		{"alarms/t/000000000000005/c.t/%61/" + tag, "name segment"},
		{"alarms/t/000000000000005/c.t/n/1-1", "generation"},
		{"alarms/t/000000000000005/c.t/n/00000000000000000000-0000000000000001", "generation 0"},
		{"alarms/t/000000000000005/c.t/n/00000000000000000001-000000000000000A", "nonce"},
		{"alarms/t/000000000000005/c.t/n/00000000000000000001-00000000000000001", "nonce"},
		{"alarms/t/000000000000005/c.t/n/00000000000000000001_0000000000000001", "<generation>-<nonce>"},
		{"alarms/t/000000000000005/c.t/n/99999999999999999999-0000000000000001", "generation"},
	} {
		if k, err := ParseKey(c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseKey(%q) = %+v, %v; want an error about %s", c.key, k, err, c.want)
		}
	}
}

func TestIndexedEncodeAndParse(t *testing.T) {
	x := Indexed{At: 1234, Tag: Tag{Gen: 7, Nonce: 0xabc}}
	const want = "000000000001234/00000000000000000007-0000000000000abc"
	if x.Encode() != want {
		t.Fatalf("Encode %q, want %q", x.Encode(), want)
	}
	if back, err := ParseIndexed(want); err != nil || back != x {
		t.Fatalf("ParseIndexed = %+v, %v", back, err)
	}
	if (Indexed{}).Encode() != "" || !(Indexed{}).None() {
		t.Fatal("the zero Indexed is none, encoded empty")
	}
	if back, err := ParseIndexed(""); err != nil || !back.None() {
		t.Fatalf("ParseIndexed(\"\") = %+v, %v", back, err)
	}
	// The recorded entry is its key's tail.
	a := history.Actor{Tenant: "t", Class: "c", Name: "n"}
	k, err := x.Key(a)
	if err != nil || !strings.HasSuffix(k.String(), "/"+strings.Replace(want, "/", "/c.t/n/", 1)) || k.Indexed() != x {
		t.Fatalf("Key = %v, %v", k, err)
	}
	if _, err := (Indexed{}).Key(a); err == nil {
		t.Fatal("none names no key")
	}
	for _, c := range []struct{ s, want string }{
		{"1234", "<due>/<tag>"},
		{"1234/00000000000000000007-0000000000000abc", "due time"},
		{"000000000001234/7-abc", "generation"},
		{"000000000001234/00000000000000000000-0000000000000abc", "generation 0"},
		{"000000000001234/00000000000000000007-0000000000000abc/x", "nonce"},
	} {
		if x, err := ParseIndexed(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseIndexed(%q) = %+v, %v; want an error about %s", c.s, x, err, c.want)
		}
	}
}
