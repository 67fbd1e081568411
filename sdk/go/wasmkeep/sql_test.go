package wasmkeep

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

func TestAppendArgs(t *testing.T) {
	b, err := appendArgs(nil, []any{
		nil, 1, int64(-2), int32(3), int16(4), int8(5), uint8(6), uint16(7), uint32(8), uint(9), uint64(10),
		true, false, 1.5, float32(0.25), "héllo", []byte{0, 1}, []byte(nil), []byte{},
		Value{abi.Value{Kind: abi.KindText, Bytes: []byte("v")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := abi.NewReader(b)
	got := r.Values(nil)
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	integer := func(i int64) abi.Value { return abi.Value{Kind: abi.KindInteger, Int: i} }
	want := []abi.Value{
		{}, integer(1), integer(-2), integer(3), integer(4), integer(5), integer(6), integer(7), integer(8), integer(9), integer(10),
		integer(1), integer(0), {Kind: abi.KindReal, Float: 1.5}, {Kind: abi.KindReal, Float: 0.25},
		{Kind: abi.KindText, Bytes: []byte("héllo")}, {Kind: abi.KindBlob, Bytes: []byte{0, 1}}, {}, {Kind: abi.KindBlob, Bytes: []byte{}},
		{Kind: abi.KindText, Bytes: []byte("v")},
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d values, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Int != w.Int || g.Float != w.Float || string(g.Bytes) != string(w.Bytes) {
			t.Errorf("argument %d: got %+v, want %+v", i+1, g, w)
		}
	}
}

func TestAppendArgsRefusesWithBindError(t *testing.T) {
	for _, arg := range []any{struct{}{}, uint64(math.MaxInt64 + 1), uint(math.MaxUint), new(int), int64ptr{}} {
		_, err := appendArgs(nil, []any{1, arg})
		var se *SQLError
		if !errors.As(err, &se) || se.Kind != SQLBind {
			t.Errorf("argument %T: error %v, want a bind *SQLError", arg, err)
		}
	}
	if cap(argVals) > 0 && argVals[:cap(argVals)][0].Kind != abi.KindNull {
		t.Error("argVals keeps the last arguments alive")
	}
}

type int64ptr struct{ *int64 }

// rowsPayload encodes a result set as the host does.
func rowsPayload(columns []string, rows ...[]abi.Value) []byte {
	var w abi.RowsWriter
	w.Begin(columns)
	for _, r := range rows {
		w.Row(r)
	}
	return w.Buf
}

func text(s string) abi.Value { return abi.Value{Kind: abi.KindText, Bytes: []byte(s)} }

func TestRowsDecodeAndScan(t *testing.T) {
	rows, err := decodeRows(rowsPayload([]string{"id", "name", "score", "data"},
		[]abi.Value{{Kind: abi.KindInteger, Int: 1}, text("alice"), {Kind: abi.KindReal, Float: 2.5}, {Kind: abi.KindBlob, Bytes: []byte{9}}},
		[]abi.Value{{Kind: abi.KindInteger, Int: 2}, text("bob"), {Kind: abi.KindNull}, {Kind: abi.KindNull}},
	))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows.Columns(), []string{"id", "name", "score", "data"}) || rows.Len() != 2 {
		t.Fatalf("columns %q, %d rows", rows.Columns(), rows.Len())
	}
	if err := rows.Scan(new(int)); err == nil {
		t.Error("Scan before Next succeeded")
	}
	var (
		ids   []int64
		names []string
		score Value
		data  []byte
	)
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name, &score, &data); err != nil {
			t.Fatal(err)
		}
		ids, names = append(ids, id), append(names, name)
	}
	if !reflect.DeepEqual(ids, []int64{1, 2}) || !reflect.DeepEqual(names, []string{"alice", "bob"}) || !score.IsNull() || data != nil {
		t.Errorf("scanned %v %v %+v %v", ids, names, score, data)
	}
	if r := rows.Row(0); r[2].Float() != 2.5 || r[1].Text() != "alice" || r[3].Blob()[0] != 9 {
		t.Errorf("Row(0) = %+v", r)
	}
	if err := rows.Scan(new(int64)); err == nil {
		t.Error("Scan with too few destinations succeeded")
	}
}

func TestRowsEmptyResult(t *testing.T) {
	rows, err := decodeRows(rowsPayload(nil))
	if err != nil || rows.Len() != 0 || rows.Next() {
		t.Fatalf("rows %+v, err %v", rows, err)
	}
	if err := (&Row{rows: rows}).Scan(); err != ErrNoRows {
		t.Errorf("Row.Scan = %v, want ErrNoRows", err)
	}
	sqlErr := &SQLError{Kind: SQLSyntax, Message: "near x"}
	if err := (&Row{err: sqlErr}).Scan(); err != sqlErr {
		t.Errorf("Row.Scan = %v, want the query's error", err)
	}
}

func TestRowsRefusesMalformed(t *testing.T) {
	good := rowsPayload([]string{"a"}, []abi.Value{text("x")})
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"huge count": func() []byte { // a row count no payload can hold must not allocate
			b := rowsPayload([]string{"a", "b"})
			copy(b[len(b)-4:], []byte{0xff, 0xff, 0xff, 0x7f})
			return b
		}(),
	} {
		if _, err := decodeRows(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestScanConversions(t *testing.T) {
	integer := Value{abi.Value{Kind: abi.KindInteger, Int: 7}}
	real := Value{abi.Value{Kind: abi.KindReal, Float: 2.5}}
	whole := Value{abi.Value{Kind: abi.KindReal, Float: 3}}
	null := Value{}
	num := Value{text("12")}
	word := Value{text("true")}
	blob := Value{abi.Value{Kind: abi.KindBlob, Bytes: []byte("b")}}
	fails := errors.New("fails")
	for _, c := range []struct {
		v    Value
		dest any
		want any
	}{
		{integer, new(int64), int64(7)},
		{integer, new(int), 7},
		{integer, new(float64), 7.0},
		{integer, new(string), "7"},
		{integer, new(bool), true},
		{integer, new([]byte), []byte("7")},
		{integer, new(any), int64(7)},
		{real, new(float64), 2.5},
		{real, new(int64), fails},
		{whole, new(int64), int64(3)},
		{real, new(string), "2.5"},
		{real, new(any), 2.5},
		{num, new(int64), int64(12)},
		{num, new(float64), 12.0},
		{word, new(bool), true},
		{word, new(int64), fails},
		{blob, new(string), "b"},
		{blob, new(any), []byte("b")},
		{null, new(int64), fails},
		{null, new(string), fails},
		{null, new(bool), fails},
		{null, new([]byte), []byte(nil)},
		{null, new(any), nil},
		{integer, new(int32), fails},
	} {
		err := scanValue(c.v, c.dest)
		if c.want == fails {
			if err == nil {
				t.Errorf("scan %+v into %T: no error", c.v, c.dest)
			}
			continue
		}
		if err != nil {
			t.Errorf("scan %+v into %T: %v", c.v, c.dest, err)
			continue
		}
		if got := reflect.ValueOf(c.dest).Elem().Interface(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("scan %+v into %T = %#v, want %#v", c.v, c.dest, got, c.want)
		}
	}
}

func TestValueAccessors(t *testing.T) {
	v := Value{abi.Value{Kind: abi.KindReal, Float: -2.75}}
	if v.Int() != -2 || v.Float() != -2.75 || v.Text() != "-2.75" || v.Blob() != nil || v.IsNull() || v.Kind() != KindReal {
		t.Errorf("accessors of %+v", v)
	}
	if n := (Value{}); !n.IsNull() || n.Text() != "" || n.Int() != 0 {
		t.Errorf("accessors of NULL")
	}
}

func TestDecodeHostResults(t *testing.T) {
	if n, err := decodeCount(abi.AppendU64(nil, 3)); n != 3 || err != nil {
		t.Errorf("decodeCount = %d, %v", n, err)
	}
	if _, err := decodeCount([]byte{1, 2}); err == nil {
		t.Error("decodeCount of 2 bytes succeeded")
	}
	se := decodeSQLError(abi.AppendError(nil, uint8(abi.SQLConstraint), "UNIQUE constraint failed: t.k"))
	if se.Kind != SQLConstraint || se.Error() != "sql constraint: UNIQUE constraint failed: t.k" {
		t.Errorf("decodeSQLError = %+v (%v)", se, se)
	}
	ce := decodeCallError(abi.AppendError(nil, uint8(abi.CallReentrant), ""))
	var target *CallError
	if !errors.As(error(ce), &target) || target.Kind != CallReentrant || ce.Error() != "call reentrant" {
		t.Errorf("decodeCallError = %+v (%v)", ce, ce)
	}
	want := Address{Tenant: "default", Class: "chat", Name: "room 1"}
	if a, err := decodeAddress(abi.AppendAddress(nil, want)); a != want || err != nil {
		t.Errorf("decodeAddress = %+v, %v", a, err)
	}
}
