package storagetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// roundTrip are values that must come back exactly as sent. (Not NaN:
// SQLite stores a NaN as NULL.)
var roundTrip = []abi.Value{
	N(),
	I(0), I(1), I(-1), I(math.MaxInt64), I(math.MinInt64), I(1 << 53),
	R(1.5), R(-2.25), R(math.MaxFloat64), R(math.SmallestNonzeroFloat64), R(math.Inf(1)), R(math.Inf(-1)), R(1e-300), R(math.Copysign(0, -1)),
	T(""), T("hello"), T("héllo wörld ✓"), T("a\x00b"), T("\xff\xfe not UTF-8 \xc3"), T("2024-01-01 10:00:00"),
	B(nil), B([]byte{0}), B([]byte{0xff, 0x00, 0x80, 'x'}), B([]byte("text-looking blob")),
}

var valueTests = []test{
	{"BoundAndSelected", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		for _, v := range roundTrip {
			if got := x.query("SELECT ?", v).one(); !Same(got, v) {
				t.Errorf("SELECT ? with %s returned %s", show(v), show(got))
			}
		}
	}},
	{"StoredAndRead", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		// An untyped column keeps every value as given; a DATETIME one keeps
		// date-shaped text as text (drivers that parse dates must not).
		x.exec("CREATE TABLE v(id INTEGER PRIMARY KEY, any, at DATETIME)")
		for i, v := range roundTrip {
			x.exec("INSERT INTO v(id, any) VALUES(?, ?)", I(int64(i)), v)
		}
		r := x.query("SELECT id, any FROM v ORDER BY id")
		if len(r.vals) != len(roundTrip) {
			t.Fatalf("read %d rows back, want %d", len(r.vals), len(roundTrip))
		}
		for i, row := range r.vals {
			if !Same(row[1], roundTrip[i]) {
				t.Errorf("stored %s, read %s", show(roundTrip[i]), show(row[1]))
			}
		}
		for _, at := range []string{"2024-01-01 10:00:00", "2024-01-01T10:00:00.50Z", "2024-02-30"} {
			x.exec("DELETE FROM v")
			x.exec("INSERT INTO v(id, at) VALUES(1, ?)", T(at))
			if got := x.query("SELECT at FROM v").one(); !Same(got, T(at)) {
				t.Errorf("DATETIME column: stored %q, read %s", at, show(got))
			}
		}
	}},
	{"EmptyBlobIsNotNull", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		r := x.query("SELECT ? IS NULL, typeof(?), ? IS NULL, typeof(?)", B([]byte{}), B(nil), T(""), T(""))
		want := []abi.Value{I(0), T("blob"), I(0), T("text")}
		for i, v := range r.vals[0] {
			if !Same(v, want[i]) {
				t.Errorf("column %d: %s, want %s", i, show(v), show(want[i]))
			}
		}
	}},
	{"RowsChanged", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		if n := x.exec("INSERT INTO t VALUES(1), (2), (3)"); n != 3 {
			t.Errorf("INSERT of 3 rows: %d changed", n)
		}
		if n := x.exec("UPDATE t SET a = a + 1 WHERE a > 1"); n != 2 {
			t.Errorf("UPDATE of 2 rows: %d changed", n)
		}
		// Not an INSERT, UPDATE or DELETE: nothing changed, whatever the last one did.
		for _, sql := range []string{"CREATE TABLE u(a)", "SELECT * FROM t", "PRAGMA user_version = 1"} {
			if n := x.exec(sql); n != 0 {
				t.Errorf("%s: %d changed, want 0", sql, n)
			}
		}
		if n := x.exec("DELETE FROM t"); n != 3 {
			t.Errorf("DELETE of 3 rows: %d changed", n)
		}
	}},
	{"ResultSets", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a INTEGER, b TEXT)")
		r := x.query("SELECT a, b AS label FROM t")
		if fmt.Sprint(r.cols) != "[a label]" || len(r.vals) != 0 {
			t.Errorf("empty result: columns %q, %d rows; want [a label] and none", r.cols, len(r.vals))
		}
		for i := range 100 {
			x.exec("INSERT INTO t VALUES(?, ?)", I(int64(i)), T(fmt.Sprint("row ", i)))
		}
		r = x.query("SELECT a, b FROM t WHERE a >= ? ORDER BY a", I(90))
		if len(r.vals) != 10 || r.vals[9][0].Int != 99 || string(r.vals[9][1].Bytes) != "row 99" {
			t.Errorf("got %d rows, last %v; want 10 ending with 99, \"row 99\"", len(r.vals), r.vals[len(r.vals)-1])
		}
		r = x.query("INSERT INTO t VALUES(?, ?) RETURNING a", I(1000), N())
		if r.one().Int != 1000 {
			t.Errorf("INSERT ... RETURNING through Query: %v", r.vals)
		}
	}},
}

func show(v abi.Value) string {
	switch v.Kind {
	case abi.KindNull:
		return "NULL"
	case abi.KindInteger:
		return fmt.Sprintf("integer %d", v.Int)
	case abi.KindReal:
		return fmt.Sprintf("real %g", v.Float)
	case abi.KindText:
		return fmt.Sprintf("text %q", v.Bytes)
	case abi.KindBlob:
		return fmt.Sprintf("blob %x", v.Bytes)
	}
	return fmt.Sprintf("kind %d", v.Kind)
}
