package wasmbin

import (
	"errors"
	"testing"
)

func TestNumbers(t *testing.T) {
	for _, tc := range []struct {
		in     []byte
		want   uint32
		err    string // "" to read want
		strict string // what StrictU32 fails with, if it does
	}{
		{[]byte{0x00}, 0, "", ""},
		{[]byte{0xe5, 0x8e, 0x26}, 624485, "", ""},
		{[]byte{0x80, 0x00}, 0, "", ""}, // not minimal, allowed
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 1<<32 - 1, "", ""},
		{[]byte{0x80, 0x80}, 0, "truncated module", ""},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 0, "integer representation too long", ""},
		{[]byte{0x82, 0x80, 0x80, 0x80, 0x70}, 2, "", "integer too large"}, // bits past the 32nd
	} {
		r := Reader{Rest: tc.in}
		got := r.U32()
		if got != tc.want || errString(r.Err) != tc.err {
			t.Errorf("U32(% x) = %d, %v; want %d, %q", tc.in, got, r.Err, tc.want, tc.err)
		}
		want, wantErr := tc.want, tc.err
		if tc.strict != "" {
			want, wantErr = 0, tc.strict
		}
		r = Reader{Rest: tc.in}
		if got := r.StrictU32(); got != want || errString(r.Err) != wantErr {
			t.Errorf("StrictU32(% x) = %d, %v; want %d, %q", tc.in, got, r.Err, want, wantErr)
		}
	}
	for _, tc := range []struct {
		in   []byte
		want int32
		err  string
	}{
		{[]byte{0x7f}, -1, ""},
		{[]byte{0xc0, 0xbb, 0x78}, -123456, ""},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x78}, -1 << 31, ""},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x07}, 1<<31 - 1, ""},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 0, "bad signed number"}, // bit 33 does not extend the sign
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 0, "bad signed number"},
		{[]byte{0x80}, 0, "truncated module"},
	} {
		r := Reader{Rest: tc.in}
		got := r.S32()
		if got != tc.want || errString(r.Err) != tc.err {
			t.Errorf("S32(% x) = %d, %v; want %d, %q", tc.in, got, r.Err, tc.want, tc.err)
		}
	}

	r := Reader{Rest: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 7}}
	if r.SkipLEB(); r.Err != nil || r.Byte() != 7 {
		t.Errorf("SkipLEB of 10 bytes: %v", r.Err)
	}
	r = Reader{Rest: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}}
	if r.SkipLEB(); errString(r.Err) != "integer representation too long" {
		t.Errorf("SkipLEB of 11 bytes: %v", r.Err)
	}
}

func TestReader(t *testing.T) {
	r := Reader{Rest: []byte{3, 'a', 'b', 'c', 0x63, 0x70, 0x7f, 9}}
	if n := r.Count(); string(r.Bytes(n)) != "abc" || r.Err != nil {
		t.Fatalf("Count, Bytes: %v", r.Err)
	}
	r.ValueType()
	r.ValueType()
	if c := r.Byte(); c != 9 || !r.Done() || r.Err != nil {
		t.Fatalf("ValueType read %d bytes too few or many (then %d, %v)", 8-len(r.Rest), c, r.Err)
	}

	r = Reader{Rest: []byte{4, 1, 2, 3}}
	if n := r.Count(); n != 0 || errString(r.Err) != "a vector of 4 entries in 3 bytes" {
		t.Errorf("a count past the end: %d, %v", n, r.Err)
	}

	r = Reader{Rest: []byte{1, 2, 3}}
	if b := r.Bytes(4); b != nil || !errors.Is(r.Err, errTruncated) || len(r.Rest) != 0 {
		t.Errorf("Bytes past the end: %v, %v, %d left", b, r.Err, len(r.Rest))
	}
	r.Failf("later %d", 1)
	if c := r.Byte(); c != 0 || !errors.Is(r.Err, errTruncated) || !r.Done() {
		t.Errorf("after a failure: read %d, error %v; want 0 and the first error", c, r.Err)
	}
	r = Reader{Rest: []byte{1}}
	if r.Failf("at %d: %w", 5, errTooLong); errString(r.Err) != "at 5: integer representation too long" || !errors.Is(r.Err, errTooLong) || r.Byte() != 0 {
		t.Errorf("Failf: %v", r.Err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestHasSection(t *testing.T) {
	wasm := append(append([]byte(nil), Header...), TypeSection, 1, 0, StartSection, 1, 0)
	if !HasSection(wasm, StartSection) || !HasSection(wasm, TypeSection) || HasSection(wasm, CodeSection) {
		t.Error("HasSection misreads a module with a type and a start section")
	}
	if HasSection(wasm[:len(wasm)-1], StartSection) || HasSection(nil, StartSection) {
		t.Error("HasSection found a section in a cut module")
	}
}
