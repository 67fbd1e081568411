package sqlitestorage

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/storagetest"
	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The Go overrides of instr, replace, trim, ltrim, rtrim, like and glob give
// what SQLite's built-ins give, value for value and error for error: the
// same expressions over a corpus of edge cases, on a connection with the
// overrides and on a plain one, per driver.
func TestGuestFuncsMatchBuiltins(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		b := bindings[name]
		likeBlobs := slices.Contains(newDriver(t, name).(*driver).caps, storage.CapLikeBlobs)
		dir := t.TempDir()
		plain := openConn(t, b, filepath.Join(dir, "plain.db"))
		ours := openConn(t, b, filepath.Join(dir, "ours.db"))
		if err := ours.setHooks(func(int, string, string, string) int { return authOK }, func() bool { return false }); err != nil {
			t.Fatal(err)
		}
		if err := registerGuestFuncs(ours, likeBlobs); err != nil {
			t.Fatal(err)
		}
		// Small limits, so that the corpus reaches them.
		for _, c := range []conn{plain, ours} {
			c.setLimit(limitLength, 1000)
			c.setLimit(limitLikePattern, 24)
		}
		vals := corpus()
		exprs := []struct {
			sql  string
			args int
		}{
			{"SELECT instr(?1, ?2)", 2},
			{"SELECT replace(?1, ?2, ?3)", 3},
			{"SELECT trim(?1, ?2)", 2},
			{"SELECT ltrim(?1, ?2)", 2},
			{"SELECT rtrim(?1, ?2)", 2},
			{"SELECT ?2 LIKE ?1", 2},
			{"SELECT like(?1, ?2, ?3)", 3},
			{"SELECT ?2 GLOB ?1", 2},
		}
		compared := 0
		for _, x := range exprs {
			ps, _, err := plain.prepare(x.sql)
			if err != nil {
				t.Fatal(err)
			}
			os, _, err := ours.prepare(x.sql)
			if err != nil {
				t.Fatal(err)
			}
			args := make([]abi.Value, x.args)
			var each func(i int)
			each = func(i int) {
				if i == len(args) {
					want, werr := evalStmt(ps, args)
					got, gerr := evalStmt(os, args)
					compared++
					if !sameResult(want, werr, got, gerr) {
						t.Errorf("%s with %s: got %s, want %s (SQLite's)", x.sql, showArgs(args), showResult(got, gerr), showResult(want, werr))
					}
					return
				}
				for _, v := range vals {
					args[i] = v
					each(i + 1)
				}
			}
			each(0)
			ps.finalize()
			os.finalize()
		}
		t.Logf("%d calls compared", compared)
	})
}

func openConn(t *testing.T, b binding, path string) conn {
	t.Helper()
	c, err := b.open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close() })
	return c
}

// corpus is the arguments every expression is tried with, in every
// position: NULLs, numbers, blobs, empty and NUL-holding strings, UTF-8 and
// broken UTF-8, and the wildcards, classes and escapes of LIKE and GLOB.
func corpus() []abi.Value {
	vals := []abi.Value{
		{Kind: abi.KindNull},
		{Kind: abi.KindInteger, Int: 0},
		{Kind: abi.KindInteger, Int: 12},
		{Kind: abi.KindInteger, Int: -120},
		{Kind: abi.KindReal, Float: 1.5},
		{Kind: abi.KindReal, Float: 1e20},
		{Kind: abi.KindBlob, Bytes: []byte{}},
		{Kind: abi.KindBlob, Bytes: []byte("a")},
		{Kind: abi.KindBlob, Bytes: []byte("abca")},
		{Kind: abi.KindBlob, Bytes: []byte{0, 'a'}},
		{Kind: abi.KindBlob, Bytes: []byte("\xc3\xa9")},
		{Kind: abi.KindBlob, Bytes: []byte{0x80, 'a', 0xff}},
	}
	for _, s := range []string{
		"", "a", "A", "b", "ab", "abc", "aBc", "abcabc", "aaaa", "  a b  ", " ",
		"%", "_", "a%", "%b%", "%c", "A_C", "%a%b%", "_%_", "%%", "\\", "a\\%", "\\_b", "x",
		"*", "?", "a*", "*b*", "[abc]", "[a-c]*", "[^a]*", "*[]]*", "[]-a]", "[z-a]", "ab[", "[", "*[b-]*", "[^]]", "*?*",
		"1", "2", "-1", "1.5",
		"é", "héllo wörld", "%é%", "_é", "日本語日本", "本", "*語*", "[日-本]*",
		"a\x00b", "\x00", "\xc3", "\x80abc", "a\xe6\x97", "\xc3\xa9\xc3", "\xf4\x90\x80\x80", "\xed\xa0\x80",
		strings.Repeat("xy", 300), "xy", "yyy",
	} {
		vals = append(vals, abi.Value{Kind: abi.KindText, Bytes: []byte(s)})
	}
	return vals
}

// evalStmt runs s with args and returns its one value.
func evalStmt(s stmt, args []abi.Value) (abi.Value, error) {
	defer s.reset()
	for i, v := range args {
		if err := s.bind(i+1, v); err != nil {
			return abi.Value{}, err
		}
	}
	return stepValue(s)
}

func sameResult(a abi.Value, aerr error, b abi.Value, berr error) bool {
	if aerr != nil || berr != nil {
		var ae, be *sqliteError
		return errors.As(aerr, &ae) && errors.As(berr, &be) && ae.code&0xff == be.code&0xff && ae.msg == be.msg
	}
	return storagetest.Same(a, b)
}

func showResult(v abi.Value, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return showValue(v)
}

func showValue(v abi.Value) string {
	switch v.Kind {
	case abi.KindNull:
		return "NULL"
	case abi.KindInteger:
		return fmt.Sprint(v.Int)
	case abi.KindReal:
		return fmt.Sprint(v.Float)
	case abi.KindBlob:
		return fmt.Sprintf("x'%x'", v.Bytes)
	}
	if len(v.Bytes) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", v.Bytes[:40], len(v.Bytes))
	}
	return fmt.Sprintf("%q", v.Bytes)
}

func showArgs(args []abi.Value) string {
	s := make([]string, len(args))
	for i, v := range args {
		s[i] = showValue(v)
	}
	return "(" + strings.Join(s, ", ") + ")"
}
