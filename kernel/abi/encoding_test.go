package abi

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

func TestValuesRoundTrip(t *testing.T) {
	in := []Value{
		{Kind: KindNull},
		{Kind: KindInteger, Int: math.MinInt64},
		{Kind: KindInteger, Int: math.MaxInt64},
		{Kind: KindReal, Float: -0.5},
		{Kind: KindReal, Float: math.Inf(1)},
		{Kind: KindText, Bytes: []byte("a\x00b\xff")}, // NULs and invalid UTF-8 pass through
		{Kind: KindBlob, Bytes: []byte{}},
	}
	b := AppendValues(nil, in)
	r := NewReader(b)
	out := r.Values(nil)
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("got %d values", len(out))
	}
	for i := range in {
		if in[i].Kind != out[i].Kind || in[i].Int != out[i].Int || in[i].Float != out[i].Float || !bytes.Equal(in[i].Bytes, out[i].Bytes) {
			t.Errorf("value %d: got %+v, want %+v", i, out[i], in[i])
		}
	}
}

func TestRequestResponseRoundTrip(t *testing.T) {
	req := Request{Method: "POST", Path: "/a?b=c", Headers: []Header{{"X-A", "1"}, {"X-A", "2"}}, Body: []byte("body")}
	got, err := DecodeRequest(AppendRequest(nil, &req))
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request: %+v, %v", got, err)
	}
	resp := Response{Status: 201, Body: []byte{}}
	gotResp, err := DecodeResponse(AppendResponse(nil, &resp))
	if err != nil || gotResp.Status != 201 || len(gotResp.Body) != 0 {
		t.Fatalf("response: %+v, %v", gotResp, err)
	}
}

func TestRowsWriter(t *testing.T) {
	var w RowsWriter
	w.Begin([]string{"a", "b"})
	w.Row([]Value{{Kind: KindInteger, Int: 1}, {Kind: KindText, Bytes: []byte("x")}})
	w.Row([]Value{{Kind: KindNull}, {Kind: KindBlob, Bytes: []byte{9}}})
	r := NewReader(w.Buf)
	cols, n := r.Columns()
	if !reflect.DeepEqual(cols, []string{"a", "b"}) || n != 2 || w.Rows() != 2 {
		t.Fatalf("columns %v rows %d", cols, n)
	}
	var vals []Value
	for i := 0; i < n*len(cols); i++ {
		vals = append(vals, r.Value())
	}
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	if vals[0].Int != 1 || string(vals[1].Bytes) != "x" || vals[2].Kind != KindNull || vals[3].Bytes[0] != 9 {
		t.Fatalf("values %+v", vals)
	}
}

// A corrupt payload is an error, never a panic or a huge allocation.
// A request's strings share one copy of its text: decoding allocates that
// copy and the header list, however many headers there are, and a string
// kept after the payload changes keeps its value.
func TestRequestStringsShareOneCopy(t *testing.T) {
	req := Request{Method: "GET", Path: "/p", Headers: []Header{{"A", "1"}, {"B", "2"}, {"C", "3"}}, Body: []byte("x")}
	payload := AppendRequest(nil, &req)
	if n := testing.AllocsPerRun(100, func() { DecodeRequest(payload) }); n != 2 {
		t.Errorf("DecodeRequest allocated %v times, want 2 (the text, the header list)", n)
	}
	got, _ := DecodeRequest(payload)
	clear(payload)
	if got.Method != "GET" || got.Path != "/p" || got.Headers[2] != (Header{"C", "3"}) {
		t.Errorf("after the payload changed: %+v", got)
	}
}

func TestCorruptPayloads(t *testing.T) {
	good := AppendRequest(nil, &Request{Method: "GET", Path: "/", Headers: []Header{{"A", "b"}}, Body: []byte("xyz")})
	for i := 0; i < len(good); i++ {
		if _, err := DecodeRequest(good[:i]); err == nil {
			t.Errorf("truncated at %d: no error", i)
		}
	}
	if _, err := DecodeRequest(append(good, 0)); err != ErrTrailing {
		t.Errorf("trailing byte: %v", err)
	}
	huge := AppendU32(nil, 0xffffffff)
	r := NewReader(huge)
	if r.Values(nil) != nil || r.Err() == nil {
		t.Error("a huge count must fail")
	}
	r = NewReader([]byte{9})
	if r.Value(); r.Err() == nil {
		t.Error("an unknown kind must fail")
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(AppendRequest(nil, &Request{Method: "GET", Path: "/x", Body: []byte("b")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeRequest(b)
		r := NewReader(b)
		r.Values(nil)
	})
}
