package abi

import (
	"encoding/binary"
	"errors"
	"math"
)

// The encoding is little-endian and length-prefixed: a u32 length before
// every string and byte list, a u32 count before every list. Encoders append
// to a caller's buffer so that a reused buffer makes them allocation-free.

// Value is one SQL value. Text and Blob share Bytes; a decoded value's Bytes
// alias the buffer it was decoded from.
type Value struct {
	Kind  ValueKind
	Int   int64
	Float float64
	Bytes []byte
}

// Header is one HTTP header line; names keep the case they were sent with.
type Header struct {
	Name, Value string
}

// Request is an HTTP request handed to a guest, or sent by one with
// actors.call or http_fetch (where Path is the full URL).
type Request struct {
	Method  string
	Path    string // path and query, starting with "/"
	Headers []Header
	Body    []byte
}

// Response is an HTTP response.
type Response struct {
	Status  int
	Headers []Header
	Body    []byte
}

// Address is an actor's address.
type Address struct {
	Tenant, Class, Name string
}

// ErrShort reports a payload that ends before its encoding does.
var ErrShort = errors.New("abi: payload truncated")

// ErrTrailing reports bytes left over after a complete encoding.
var ErrTrailing = errors.New("abi: trailing bytes after payload")

func AppendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func AppendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func AppendBytes(b, v []byte) []byte {
	b = AppendU32(b, uint32(len(v)))
	return append(b, v...)
}

func AppendString(b []byte, s string) []byte {
	b = AppendU32(b, uint32(len(s)))
	return append(b, s...)
}

// AppendValue encodes v: a kind byte, then i64, f64, or a byte list.
func AppendValue(b []byte, v Value) []byte {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case KindInteger:
		b = AppendU64(b, uint64(v.Int))
	case KindReal:
		b = AppendU64(b, math.Float64bits(v.Float))
	case KindText, KindBlob:
		b = AppendBytes(b, v.Bytes)
	}
	return b
}

// AppendValues encodes a parameter list: a count, then each value.
func AppendValues(b []byte, vs []Value) []byte {
	b = AppendU32(b, uint32(len(vs)))
	for _, v := range vs {
		b = AppendValue(b, v)
	}
	return b
}

func appendHeaders(b []byte, hs []Header) []byte {
	b = AppendU32(b, uint32(len(hs)))
	for _, h := range hs {
		b = AppendString(b, h.Name)
		b = AppendString(b, h.Value)
	}
	return b
}

// AppendRequest encodes r; the body comes last so a reader can take it as a
// slice of the buffer.
func AppendRequest(b []byte, r *Request) []byte {
	b = AppendString(b, r.Method)
	b = AppendString(b, r.Path)
	b = appendHeaders(b, r.Headers)
	return AppendBytes(b, r.Body)
}

// AppendResponse encodes r.
func AppendResponse(b []byte, r *Response) []byte {
	b = AppendU32(b, uint32(r.Status))
	b = appendHeaders(b, r.Headers)
	return AppendBytes(b, r.Body)
}

// AppendAddress encodes an actor's address.
func AppendAddress(b []byte, a Address) []byte {
	b = AppendString(b, a.Tenant)
	b = AppendString(b, a.Class)
	return AppendString(b, a.Name)
}

// AppendError encodes an error payload: a kind byte, then the message bytes
// up to the end of the payload.
func AppendError(b []byte, kind uint8, msg string) []byte {
	b = append(b, kind)
	return append(b, msg...)
}

// RowsWriter encodes a result set as it is produced: column names once,
// then a row count patched in at the end, then the values row by row.
type RowsWriter struct {
	Buf     []byte
	countAt int
	rows    uint32
}

// Begin starts a result set with the given column names in Buf (which it
// appends to).
func (w *RowsWriter) Begin(columns []string) {
	w.Buf = AppendU32(w.Buf, uint32(len(columns)))
	for _, c := range columns {
		w.Buf = AppendString(w.Buf, c)
	}
	w.countAt = len(w.Buf)
	w.Buf = AppendU32(w.Buf, 0)
	w.rows = 0
}

// Row appends one row; len(vals) must equal the number of columns.
func (w *RowsWriter) Row(vals []Value) {
	for _, v := range vals {
		w.Buf = AppendValue(w.Buf, v)
	}
	w.rows++
	binary.LittleEndian.PutUint32(w.Buf[w.countAt:], w.rows)
}

// Rows is the number of rows written since Begin.
func (w *RowsWriter) Rows() int { return int(w.rows) }

// Reader decodes a payload. The first failure sticks: after it every method
// returns a zero value and Err reports it, so callers check once at the end.
type Reader struct {
	b   []byte
	off int
	err error
}

func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Reset points r at a new payload, for reuse without allocation.
func (r *Reader) Reset(b []byte) { *r = Reader{b: b} }

// Err is the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Done reports ErrTrailing if bytes are left, or the first error.
func (r *Reader) Done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = ErrTrailing
	}
	return r.err
}

// Remaining is the number of undecoded bytes.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = ErrShort
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

func (r *Reader) U8() uint8 {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (r *Reader) U32() uint32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(v)
}

func (r *Reader) U64() uint64 {
	v := r.take(8)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// Bytes reads a length-prefixed byte list; the result aliases the payload.
func (r *Reader) Bytes() []byte {
	n := r.U32()
	if r.err != nil {
		return nil
	}
	return r.take(int(n))
}

// String reads a length-prefixed string (a copy).
func (r *Reader) String() string { return string(r.Bytes()) }

// Rest returns the undecoded bytes and consumes them.
func (r *Reader) Rest() []byte { return r.take(len(r.b) - r.off) }

// Count reads a list length and checks that at least min bytes per element
// remain, so a corrupt count cannot make the caller allocate a huge slice.
func (r *Reader) Count(min int) int {
	n := r.U32()
	if r.err == nil && uint64(n)*uint64(min) > uint64(r.Remaining()) {
		r.err = ErrShort
		return 0
	}
	return int(n)
}

// Value reads one SQL value; text and blob bytes alias the payload.
func (r *Reader) Value() Value {
	k := ValueKind(r.U8())
	v := Value{Kind: k}
	switch k {
	case KindNull:
	case KindInteger:
		v.Int = int64(r.U64())
	case KindReal:
		v.Float = math.Float64frombits(r.U64())
	case KindText, KindBlob:
		v.Bytes = r.Bytes()
	default:
		if r.err == nil {
			r.err = errors.New("abi: unknown value kind")
		}
	}
	return v
}

// Values reads a parameter list, appending to dst.
func (r *Reader) Values(dst []Value) []Value {
	n := r.Count(1)
	for i := 0; i < n && r.err == nil; i++ {
		dst = append(dst, r.Value())
	}
	return dst
}

// text reads the strings of a Request or Response up to its body (with
// method and path when request is true, then the header list) with one
// copy of their bytes, of which each string is a substring: a request
// with n headers costs one allocation for its text, not 2n+2.
func (r *Reader) text(request bool) (method, path string, hs []Header) {
	start := r.off
	if request {
		r.Bytes()
		r.Bytes()
	}
	n := r.Count(8)
	for i := 0; i < n && r.err == nil; i++ {
		r.Bytes()
		r.Bytes()
	}
	if r.err != nil {
		return "", "", nil
	}
	t := textReader{s: string(r.b[start:r.off])}
	if request {
		method, path = t.next(), t.next()
	}
	t.off += 4 // the count, read above
	if n > 0 {
		hs = make([]Header, n)
		for i := range hs {
			hs[i] = Header{Name: t.next(), Value: t.next()}
		}
	}
	return method, path, hs
}

// textReader walks text that a Reader has already checked.
type textReader struct {
	s   string
	off int
}

func (t *textReader) next() string {
	b := t.s[t.off : t.off+4]
	n := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	v := t.s[t.off+4 : t.off+4+n]
	t.off += 4 + n
	return v
}

// Request decodes a Request; its Body aliases the payload.
func (r *Reader) Request() Request {
	var q Request
	q.Method, q.Path, q.Headers = r.text(true)
	q.Body = r.Bytes()
	return q
}

// Response decodes a Response; its Body aliases the payload.
func (r *Reader) Response() Response {
	var s Response
	s.Status = int(r.U32())
	_, _, s.Headers = r.text(false)
	s.Body = r.Bytes()
	return s
}

// Address decodes an actor's address.
func (r *Reader) Address() Address {
	return Address{Tenant: r.String(), Class: r.String(), Name: r.String()}
}

// DecodeRequest decodes a whole payload as a Request.
func DecodeRequest(b []byte) (Request, error) {
	r := Reader{b: b}
	q := r.Request()
	return q, r.Done()
}

// DecodeResponse decodes a whole payload as a Response.
func DecodeResponse(b []byte) (Response, error) {
	r := Reader{b: b}
	s := r.Response()
	return s, r.Done()
}

// Columns reads the header of an encoded Rows: the column names and the row
// count. The values follow, row by row, to be read with Value.
func (r *Reader) Columns() (columns []string, rows int) {
	n := r.Count(4)
	columns = make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		columns = append(columns, r.String())
	}
	return columns, int(r.U32())
}
