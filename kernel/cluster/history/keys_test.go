package history

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/app"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

func TestKeyFormatAndParse(t *testing.T) {
	a := Actor{Tenant: "default", Class: "counter", Name: "alice"}
	seg := Key{Kind: Segment, TXID: 0x2a, Gen: 3, Parent: 2}
	got, err := ObjectKey(a, seg)
	if err != nil {
		t.Fatal(err)
	}
	const want = "actors/default/counter/alice/wal/000000000000002a-0000000000000003-0000000000000002.ltx"
	if got != want {
		t.Fatalf("segment key %q, want %q", got, want)
	}
	snap := Key{Kind: Snapshot, TXID: 0x40, Gen: 7}
	got, err = ObjectKey(a, snap)
	if err != nil {
		t.Fatal(err)
	}
	if want := "actors/default/counter/alice/snapshot/0000000000000040-0000000000000007.ltx"; got != want {
		t.Fatalf("snapshot key %q, want %q", got, want)
	}
	for _, k := range []Key{seg, snap, {Kind: Segment, TXID: 1, Gen: 1}, {Kind: Segment, TXID: ^uint64(0), Gen: ^uint64(0), Parent: 5}} {
		back, err := ParseRel(k.Rel())
		if err != nil || back != k {
			t.Fatalf("ParseRel(%q) = %+v, %v; want %+v", k.Rel(), back, err, k)
		}
	}
}

func TestParseRelIsStrict(t *testing.T) {
	for _, rel := range []string{
		"wal/000000000000002A-0000000000000003-0000000000000002.ltx", // uppercase
		"wal/2a-3-2.ltx", // not fixed width
		"wal/000000000000002a-0000000000000003-0000000000000002", // no .ltx
		"wal/000000000000002a-0000000000000003-0000000000000002.ltx.tmp",
		"wal/000000000000002a-0000000000000003.ltx",                       // a segment without parent
		"snapshot/000000000000002a-0000000000000003-0000000000000002.ltx", // a snapshot with one
		"wal/0000000000000001-0000000000000003-0000000000000002.ltx",      // transaction 1 on a parent
		"wal/0000000000000002-0000000000000003-0000000000000000.ltx",      // transaction 2 on nothing
		"wal/0000000000000002-0000000000000003-0000000000000004.ltx",      // parent above its generation
		"wal/0000000000000000-0000000000000003-0000000000000002.ltx",      // txid 0
		"snapshot/0000000000000002-0000000000000000.ltx",                  // generation 0
		"wal/+00000000000002a-0000000000000003-0000000000000002.ltx",      // a sign ParseUint would take
		"wal/sub/000000000000002a-0000000000000003-0000000000000002.ltx",
		"other/000000000000002a-0000000000000003.ltx",
		"",
	} {
		if k, err := ParseRel(rel); err == nil {
			t.Errorf("ParseRel(%q) = %+v, want an error", rel, k)
		}
	}
}

func TestParseListingReportsUnknownKeys(t *testing.T) {
	const p = "actors/t/c/n/"
	l, err := ParseListing(p, []bucket.Entry{
		{Key: p + "wal/0000000000000001-0000000000000001-0000000000000000.ltx"},
		{Key: p + "wal/0000000000000001-0000000000000001-0000000000000000.ltx.part"},
		{Key: p + "notes.txt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Objects) != 1 || len(l.Unknown) != 2 || l.Unknown[1].Key != p+"notes.txt" {
		t.Fatalf("listing %+v", l)
	}
	if _, err := ParseListing(p, []bucket.Entry{{Key: "actors/t/c/other/x"}}); err == nil {
		t.Fatal("a key outside the prefix was accepted")
	}
}

func TestEncodeName(t *testing.T) {
	for name, want := range map[string]string{
		"alice":       "alice",
		"a.b_c-d~e":   "a.b_c-d~e",
		"héllo world": "h%C3%A9llo%20world",
		"100%":        "100%25",
		"a+b:c@d":     "a%2Bb%3Ac%40d",
	} {
		got, err := EncodeName(name)
		if err != nil || got != want {
			t.Errorf("EncodeName(%q) = %q, %v; want %q", name, got, err, want)
		}
		back, hashed, err := DecodeName(got)
		if err != nil || hashed || back != name {
			t.Errorf("DecodeName(%q) = %q, %v, %v", got, back, hashed, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "tab\there", strings.Repeat("x", 257)} {
		if got, err := EncodeName(bad); err == nil {
			t.Errorf("EncodeName(%q) = %q, want an error", bad, got)
		}
	}
	for _, bad := range []string{"%41", "%c3%a9", "a%2", "a%zz", "a b", "x%~00", "."} {
		if got, _, err := DecodeName(bad); err == nil {
			t.Errorf("DecodeName(%q) = %q, want an error", bad, got)
		}
	}
}

// The longest names the node accepts still make valid keys, distinct ones,
// with the longest tenant, class and app.
func TestEncodeNameLong(t *testing.T) {
	longestRoot := app.Name{Tenant: strings.Repeat("t", 64), App: strings.Repeat("a", 64)}.StateRoot()
	seen := map[string]string{}
	for _, name := range []string{
		strings.Repeat("\xff", 256),
		strings.Repeat("\xff", 255) + "\xfe",
		strings.Repeat("a", 256),
		strings.Repeat("a", 255) + "b",
		strings.Repeat("a", 199) + "é", // the cut falls inside an escape
		strings.Repeat("a", 200),       // fits as it is
	} {
		enc, err := EncodeName(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > MaxNameSegment {
			t.Fatalf("encoding of %d bytes", len(enc))
		}
		if other, dup := seen[enc]; dup {
			t.Fatalf("%q and %q encode alike", other, name)
		}
		seen[enc] = name
		key, err := ObjectKey(Actor{Tenant: strings.Repeat("t", 64), Class: strings.Repeat("c", 64), Name: name}, Key{Kind: Segment, TXID: 2, Gen: 2, Parent: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Under the longest app's state root (ADR 1045) too.
		if err := bucket.CheckKey(longestRoot + key); err != nil {
			t.Fatal(err)
		}
		back, hashed, err := DecodeName(enc)
		if err != nil {
			t.Fatalf("DecodeName(%q): %v", enc, err)
		}
		if hashed != (len(name) > 200 || strings.ContainsRune(name, 'é') || name[0] == 0xff) {
			t.Fatalf("DecodeName(%q): hashed %v", enc, hashed)
		}
		if !hashed && back != name {
			t.Fatalf("DecodeName(%q) = %q", enc, back)
		}
	}
}

func TestPrefixRefusesBadIdents(t *testing.T) {
	for _, a := range []Actor{{"", "c", "n"}, {"T", "c", "n"}, {"t", "c/d", "n"}, {"t", strings.Repeat("c", 65), "n"}, {"t", "c", ""}} {
		if p, err := Prefix(a); err == nil {
			t.Errorf("Prefix(%+v) = %q, want an error", a, p)
		}
	}
	if _, err := ObjectKey(Actor{"t", "c", "n"}, Key{Kind: Segment, TXID: 1, Gen: 0}); err == nil {
		t.Error("a key of generation 0 was formatted")
	}
}
