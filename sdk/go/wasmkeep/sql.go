package wasmkeep

import (
	"errors"
	"math"
	"strconv"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// Kind is a SQL value's type, one per SQLite storage class.
type Kind = abi.ValueKind

const (
	KindNull    = abi.KindNull
	KindInteger = abi.KindInteger
	KindReal    = abi.KindReal
	KindText    = abi.KindText
	KindBlob    = abi.KindBlob
)

var kindNames = [...]string{"NULL", "integer", "real", "text", "blob"}

// Value is one SQL value from a query; the zero Value is NULL. A Value can be
// passed back as an argument, keeping its type.
type Value struct{ v abi.Value }

// Kind is the value's storage class.
func (v Value) Kind() Kind { return v.v.Kind }

// IsNull reports whether the value is NULL.
func (v Value) IsNull() bool { return v.v.Kind == KindNull }

// Int returns an integer, a real truncated toward zero, or a text parsed as a
// decimal integer; 0 for anything else.
func (v Value) Int() int64 {
	i, _ := v.int()
	return i
}

// Float returns a real, an integer converted, or a text parsed as a number;
// 0 for anything else.
func (v Value) Float() float64 {
	f, _ := v.float()
	return f
}

// Text returns a text or a blob as a string, a number formatted in decimal,
// and "" for NULL.
func (v Value) Text() string {
	switch v.v.Kind {
	case KindInteger:
		return strconv.FormatInt(v.v.Int, 10)
	case KindReal:
		return strconv.FormatFloat(v.v.Float, 'g', -1, 64)
	}
	return string(v.v.Bytes)
}

// Blob returns the bytes of a blob or a text (shared with the Rows: do not
// modify them), and nil for anything else.
func (v Value) Blob() []byte { return v.v.Bytes }

func (v Value) int() (int64, bool) {
	switch v.v.Kind {
	case KindInteger:
		return v.v.Int, true
	case KindReal:
		i := int64(v.v.Float)
		return i, float64(i) == v.v.Float
	case KindText:
		i, err := strconv.ParseInt(string(v.v.Bytes), 10, 64)
		return i, err == nil
	}
	return 0, false
}

func (v Value) float() (float64, bool) {
	switch v.v.Kind {
	case KindInteger:
		return float64(v.v.Int), true
	case KindReal:
		return v.v.Float, true
	case KindText:
		f, err := strconv.ParseFloat(string(v.v.Bytes), 64)
		return f, err == nil
	}
	return 0, false
}

// SQLErrorKind says why a statement failed.
type SQLErrorKind = abi.SQLErrorKind

const (
	SQLSyntax             = abi.SQLSyntax             // the SQL did not parse, or names a missing table or column
	SQLConstraint         = abi.SQLConstraint         // UNIQUE, NOT NULL, CHECK or FOREIGN KEY failed
	SQLBind               = abi.SQLBind               // the arguments do not match the statement's parameters
	SQLMultipleStatements = abi.SQLMultipleStatements // send one statement at a time
	SQLQuotaExceeded      = abi.SQLQuotaExceeded      // a size, time or CPU cap was reached
	SQLNotAllowed         = abi.SQLNotAllowed         // actors may not do this (ATTACH, some PRAGMAs, ...)
	SQLInternal           = abi.SQLInternal           // the host failed; the event should fail
)

// SQLError is the error of Exec, ExecDurable, Query and DeleteSelf; find it
// with errors.As.
type SQLError struct {
	Kind    SQLErrorKind
	Message string // usually SQLite's own message
}

func (e *SQLError) Error() string { return "sql " + e.Kind.String() + ": " + e.Message }

func decodeSQLError(b []byte) *SQLError {
	var r abi.Reader
	r.Reset(b)
	return &SQLError{Kind: SQLErrorKind(r.U8()), Message: string(r.Rest())}
}

// decodeCount decodes sql_exec's result, the number of rows changed.
func decodeCount(b []byte) (int64, error) {
	var r abi.Reader
	r.Reset(b)
	n := r.U64()
	if err := r.Done(); err != nil {
		return 0, malformed("row count", err)
	}
	return int64(n), nil
}

func malformed(what string, err error) error {
	return errors.New("wasmkeep: malformed " + what + " from the host: " + err.Error())
}

// argVals is reused to encode arguments without allocating.
var argVals []abi.Value

// appendArgs encodes args as a Values list. int, int64 and the other integer
// types, float64, float32, string, []byte, bool, nil and Value are accepted;
// a nil []byte is NULL, as in database/sql.
func appendArgs(b []byte, args []any) ([]byte, error) {
	vals := argVals[:0]
	defer func() { clear(vals); argVals = vals[:0] }()
	for i, a := range args {
		v := abi.Value{Kind: KindInteger}
		switch a := a.(type) {
		case nil:
			v.Kind = KindNull
		case int:
			v.Int = int64(a)
		case int64:
			v.Int = a
		case int32:
			v.Int = int64(a)
		case int16:
			v.Int = int64(a)
		case int8:
			v.Int = int64(a)
		case uint8:
			v.Int = int64(a)
		case uint16:
			v.Int = int64(a)
		case uint32:
			v.Int = int64(a)
		case uint:
			if uint64(a) > math.MaxInt64 {
				return b, bindError(i, "overflows int64")
			}
			v.Int = int64(a)
		case uint64:
			if a > math.MaxInt64 {
				return b, bindError(i, "overflows int64")
			}
			v.Int = int64(a)
		case bool:
			if a {
				v.Int = 1
			}
		case float64:
			v = abi.Value{Kind: KindReal, Float: a}
		case float32:
			v = abi.Value{Kind: KindReal, Float: float64(a)}
		case string:
			// The encoder only reads the bytes, so they need no copy.
			v = abi.Value{Kind: KindText, Bytes: unsafe.Slice(unsafe.StringData(a), len(a))}
		case []byte:
			v = abi.Value{Kind: KindBlob, Bytes: a}
			if a == nil {
				v.Kind = KindNull
			}
		case Value:
			v = a.v
		default:
			return b, bindError(i, "has an unsupported type (use an integer, float64, string, []byte, bool, nil or Value)")
		}
		vals = append(vals, v)
	}
	return abi.AppendValues(b, vals), nil
}

func bindError(i int, problem string) error {
	return &SQLError{Kind: SQLBind, Message: "argument " + strconv.Itoa(i+1) + " " + problem}
}

// ErrNoRows is what Row.Scan returns when the query returned no row.
var ErrNoRows = errors.New("wasmkeep: no rows in result set")

// Rows is a query's whole result, read with Next and Scan as in
// database/sql, or by index with Row.
type Rows struct {
	columns []string
	values  []Value // row after row
	next    int     // the row Next moves to
}

// decodeRows decodes sql_query's result; b must not be reused, since text
// and blob values alias it.
func decodeRows(b []byte) (*Rows, error) {
	var r abi.Reader
	r.Reset(b)
	columns, n := r.Columns()
	// Every value takes at least its kind byte: check before allocating.
	if r.Err() == nil && uint64(n)*uint64(len(columns)) > uint64(r.Remaining()) {
		return nil, malformed("rows", abi.ErrShort)
	}
	values := make([]Value, n*len(columns))
	for i := range values {
		values[i] = Value{r.Value()}
	}
	if err := r.Done(); err != nil {
		return nil, malformed("rows", err)
	}
	return &Rows{columns: columns, values: values}, nil
}

// Columns returns the column names.
func (rs *Rows) Columns() []string { return rs.columns }

// Len is the number of rows.
func (rs *Rows) Len() int {
	if len(rs.columns) == 0 {
		return 0
	}
	return len(rs.values) / len(rs.columns)
}

// Row returns the values of row i, in column order.
func (rs *Rows) Row(i int) []Value {
	n := len(rs.columns)
	return rs.values[i*n : (i+1)*n : (i+1)*n]
}

// Next moves to the next row, the first one on the first call, and reports
// whether there is one.
func (rs *Rows) Next() bool {
	if rs.next >= rs.Len() {
		return false
	}
	rs.next++
	return true
}

// Scan copies the current row's values into dest, one pointer per column:
// *int64, *int, *float64, *string, *[]byte, *bool, *Value or *any. NULL is
// accepted only by *[]byte (nil), *Value and *any (nil).
func (rs *Rows) Scan(dest ...any) error {
	if rs.next == 0 {
		return errors.New("wasmkeep: Scan called before Next")
	}
	return rs.scan(rs.next-1, dest)
}

func (rs *Rows) scan(row int, dest []any) error {
	if len(dest) != len(rs.columns) {
		return errors.New("wasmkeep: Scan: " + strconv.Itoa(len(rs.columns)) + " columns, " + strconv.Itoa(len(dest)) + " destinations")
	}
	for i, v := range rs.Row(row) {
		if err := scanValue(v, dest[i]); err != nil {
			return errors.New("wasmkeep: Scan column " + strconv.Quote(rs.columns[i]) + ": " + err.Error())
		}
	}
	return nil
}

func scanValue(v Value, dest any) error {
	ok := true
	switch d := dest.(type) {
	case *Value:
		*d = v
	case *int64:
		*d, ok = v.int()
	case *int:
		var i int64
		i, ok = v.int()
		*d = int(i)
	case *float64:
		*d, ok = v.float()
	case *bool:
		var i int64
		i, ok = v.int()
		if !ok && v.v.Kind == KindText {
			*d, ok = parseBool(string(v.v.Bytes))
		} else {
			*d = i != 0
		}
	case *string:
		*d, ok = v.Text(), !v.IsNull()
	case *[]byte:
		switch v.v.Kind {
		case KindNull:
			*d = nil
		case KindText, KindBlob:
			*d = append([]byte{}, v.v.Bytes...)
		default:
			*d = []byte(v.Text())
		}
	case *any:
		switch v.v.Kind {
		case KindNull:
			*d = nil
		case KindInteger:
			*d = v.v.Int
		case KindReal:
			*d = v.v.Float
		case KindText:
			*d = string(v.v.Bytes)
		default:
			*d = append([]byte{}, v.v.Bytes...)
		}
	default:
		return errors.New("unsupported destination type (use *int64, *int, *float64, *string, *[]byte, *bool, *Value or *any)")
	}
	if !ok {
		return errors.New("cannot convert " + kindNames[v.v.Kind] + " to " + typeName(dest))
	}
	return nil
}

func parseBool(s string) (bool, bool) {
	b, err := strconv.ParseBool(s)
	return b, err == nil
}

func typeName(dest any) string {
	switch dest.(type) {
	case *int64:
		return "int64"
	case *int:
		return "int"
	case *float64:
		return "float64"
	case *bool:
		return "bool"
	}
	return "string"
}

// Row is the first row of a query, from QueryRow.
type Row struct {
	rows *Rows
	err  error
}

// Scan copies the row's values into dest as Rows.Scan does. It returns the
// query's error, or ErrNoRows if it returned none.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if r.rows.Len() == 0 {
		return ErrNoRows
	}
	return r.rows.scan(0, dest)
}
