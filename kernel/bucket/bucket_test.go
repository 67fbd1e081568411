package bucket

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestCheckKey(t *testing.T) {
	for _, key := range []string{
		"a",
		"nodes/node-1",
		"leases/acme/chat/caf%C3%A9%20room",
		"owners/t/c/x.attrs",
		"actors/t/c/~n_a.m-e/wal/0000000000000001-0000000000000002.ltx",
		".x/..y/...",
		strings.Repeat("a", MaxSegmentLen) + "/b",
		strings.Repeat("abc/", 239) + "abcd", // 960 bytes
	} {
		if err := CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q): %v", key, err)
		}
	}
	for key, why := range map[string]string{
		"":                                "empty",
		"/a":                              "empty segment",
		"a/":                              "empty segment",
		"a//b":                            "empty segment",
		"a/./b":                           `"." segment`,
		"..":                              `".." segment`,
		"a b":                             `byte " " at 1`,
		"a\x00":                           `byte "\x00" at 1`,
		"caf\u00e9":                       `byte "\xc3" at 3`,
		"a+b":                             `byte "+"`,
		strings.Repeat("a", 256):          "segment of 256 bytes",
		strings.Repeat("abc/", 240) + "a": "961 bytes long (at most 960)",
	} {
		err := CheckKey(key)
		if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), why) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey saying %q", key, err, why)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"", "a", "nodes/", "a/.", "a/..", strings.Repeat("abc/", 239) + "abcd"} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("CheckPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"/", "a//", "a/./", "a b", strings.Repeat("abc/", 240)} {
		if err := CheckPrefix(p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("CheckPrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestConditionCheck(t *testing.T) {
	if err := (Condition{IfAbsent: true, IfVersion: "v"}).Check(); err == nil {
		t.Error("IfAbsent with IfVersion accepted")
	}
	for _, c := range []Condition{{}, {IfAbsent: true}, {IfVersion: "v"}} {
		if err := c.Check(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestSizedBody(t *testing.T) {
	for _, c := range []struct {
		body string
		size int64
		ok   bool
	}{
		{"", 0, true}, {"a", 1, true}, {"hello world", 11, true},
		{"", 1, false}, {"hello", 11, false}, {"a", 0, false}, {"hello world", 5, false}, {"ab", 1, false}, {"a", -1, false},
	} {
		for _, r := range []io.Reader{strings.NewReader(c.body), iotest.OneByteReader(strings.NewReader(c.body)), iotest.DataErrReader(strings.NewReader(c.body))} {
			got, err := io.ReadAll(SizedBody(r, c.size))
			if c.ok && (err != nil || string(got) != c.body) {
				t.Errorf("%q as %d bytes: %q, %v", c.body, c.size, got, err)
			}
			// A wrong body never hands on as many bytes as declared.
			if !c.ok && (err == nil || int64(len(got)) >= max(c.size, 1)) {
				t.Errorf("%q as %d bytes: %q, %v; want an error before byte %d", c.body, c.size, got, err, c.size)
			}
		}
	}
	_, err := io.ReadAll(SizedBody(iotest.ErrReader(errors.New("disk on fire")), 3))
	if err == nil || err.Error() != "disk on fire" {
		t.Errorf("a failing body: %v", err)
	}
}
