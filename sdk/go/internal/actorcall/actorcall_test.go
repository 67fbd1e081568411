package actorcall

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

func answer(status int, body string, err error) Func {
	return func(string, *wasmkeep.Request) (*wasmkeep.Response, error) {
		if err != nil {
			return nil, err
		}
		return &wasmkeep.Response{StatusCode: status, Body: []byte(body)}, nil
	}
}

func TestPost(t *testing.T) {
	var got *wasmkeep.Request
	b, f := Post(func(address string, r *wasmkeep.Request) (*wasmkeep.Response, error) {
		got = r
		return &wasmkeep.Response{StatusCode: 200, Body: []byte("ok")}, nil
	}, "kv/shard-0", "/wasmkeep-kv/v1/get", []byte{1})
	if f != nil || string(b) != "ok" || got.Method != "POST" || got.URL.Path != "/wasmkeep-kv/v1/get" || string(got.Body) != "\x01" {
		t.Fatalf("200: %q %+v, request %+v", b, f, got)
	}
	if _, f := Post(answer(409, "conflict\n", nil), "a/b", "/x", nil); f == nil || f.Status != 409 || f.Message != "conflict" || f.Err != nil {
		t.Errorf("409: %+v", f)
	}
	long := strings.Repeat("x", 500)
	if _, f := Post(answer(403, long, nil), "a/b", "/x", nil); f == nil || f.Message != long[:MaxMessage] {
		t.Errorf("a long refusal keeps %d bytes", len(f.Message))
	}
	cut := errors.New("cut")
	if _, f := Post(answer(0, "", cut), "a/b", "/x", nil); f == nil || f.Err != cut {
		t.Errorf("a failed call: %+v", f)
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		status  int
		message string
		want    string
	}{
		{403, "forbidden", "kv refused (403): forbidden"},
		{0, "forbidden", "kv refused: forbidden"},
		{0, "", "kv refused"},
	} {
		if got := Describe("kv", "refused", c.status, c.message); got != c.want {
			t.Errorf("Describe(%d, %q) = %q, want %q", c.status, c.message, got, c.want)
		}
	}
}
