package wasmkeep

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// serve runs f as the actor's handler on a request and decodes its answer.
func serve(t *testing.T, req abi.Request, f HandlerFunc) (abi.Response, string) {
	t.Helper()
	defer func(h Handler) { handler = h }(handler)
	handler = f
	b, failure := serveRequest(abi.AppendRequest(nil, &req))
	if failure != "" {
		return abi.Response{}, failure
	}
	resp, err := abi.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return resp, ""
}

func header(resp abi.Response) map[string][]string {
	h := map[string][]string{}
	for _, l := range resp.Headers {
		h[l.Name] = append(h[l.Name], l.Value)
	}
	return h
}

func TestServeRequest(t *testing.T) {
	req := abi.Request{
		Method:  "POST",
		Path:    "/rooms/a%20b?who=alice&x=1",
		Headers: []abi.Header{{Name: "content-type", Value: "application/json"}, {Name: "X-Multi", Value: "1"}, {Name: "x-multi", Value: "2"}},
		Body:    []byte(`{"a":1}`),
	}
	resp, failure := serve(t, req, func(w ResponseWriter, r *Request) {
		body, _ := io.ReadAll(r.BodyReader())
		if r.Method != "POST" || r.URL.Path != "/rooms/a b" || r.URL.Query().Get("who") != "alice" ||
			r.Header.Get("Content-Type") != "application/json" || !reflect.DeepEqual(r.Header.Values("x-multi"), []string{"1", "2"}) ||
			string(body) != `{"a":1}` {
			t.Errorf("handler got %+v %+v", *r, *r.URL)
		}
		w.Header().Add("x-reply", "a")
		w.Header().Add("X-Reply", "b")
		w.WriteHeader(201)
		io.WriteString(w, "created ")
		w.Write([]byte("alice"))
	})
	if failure != "" {
		t.Fatal(failure)
	}
	want := map[string][]string{"X-Reply": {"a", "b"}, "Content-Type": {"text/plain; charset=utf-8"}}
	if resp.Status != 201 || string(resp.Body) != "created alice" || !reflect.DeepEqual(header(resp), want) {
		t.Errorf("response %d %q %v", resp.Status, resp.Body, header(resp))
	}
}

func TestServeRequestDefaults(t *testing.T) {
	resp, _ := serve(t, abi.Request{Method: "GET", Path: "/"}, func(ResponseWriter, *Request) {})
	if resp.Status != 200 || len(resp.Body) != 0 || len(resp.Headers) != 0 {
		t.Errorf("a handler that writes nothing answered %d %q %v", resp.Status, resp.Body, resp.Headers)
	}
	resp, _ = serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, _ *Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	})
	if resp.Status != 200 || !reflect.DeepEqual(header(resp), map[string][]string{"Content-Type": {"application/json"}}) {
		t.Errorf("a handler's Content-Type was replaced: %d %v", resp.Status, header(resp))
	}
}

func TestHeaderChangesAfterWriteHeaderHaveNoEffect(t *testing.T) {
	resp, _ := serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, _ *Request) {
		w.Header().Set("X-Before", "1")
		w.WriteHeader(204)
		w.Header().Set("X-After", "1")
		w.WriteHeader(500)
	})
	if resp.Status != 204 || !reflect.DeepEqual(header(resp), map[string][]string{"X-Before": {"1"}}) {
		t.Errorf("answered %d %v", resp.Status, header(resp))
	}
}

func TestError(t *testing.T) {
	resp, _ := serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, _ *Request) {
		w.Header().Set("Content-Length", "99")
		Error(w, "not here", 404)
	})
	want := map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}}
	if resp.Status != 404 || string(resp.Body) != "not here\n" || !reflect.DeepEqual(header(resp), want) {
		t.Errorf("Error answered %d %q %v", resp.Status, resp.Body, header(resp))
	}
}

func TestServeRequestFailures(t *testing.T) {
	_, failure := serve(t, abi.Request{Method: "GET", Path: "/"}, func(ResponseWriter, *Request) {
		var m map[string]int
		//lint:ignore SA5000 the handler must panic
		m["x"] = 1
	})
	if failure != "panic: assignment to entry in nil map" {
		t.Errorf("a panicking handler failed with %q", failure)
	}
	_, failure = serve(t, abi.Request{Method: "GET", Path: "/"}, func(ResponseWriter, *Request) { panic(errors.New("boom")) })
	if failure != "panic: boom" {
		t.Errorf("failure %q", failure)
	}
	_, failure = serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, _ *Request) { w.WriteHeader(42) })
	if !strings.Contains(failure, "invalid WriteHeader code 42") {
		t.Errorf("WriteHeader(42) failed with %q", failure)
	}
	if _, failure := serveRequest(nil); !strings.Contains(failure, "no handler") {
		t.Errorf("without a handler: failure %q", failure)
	}
	resp, failure := serve(t, abi.Request{Method: "GET", Path: "/a%zz"}, func(ResponseWriter, *Request) { t.Error("handler called on a malformed path") })
	if failure != "" || resp.Status != 400 {
		t.Errorf("malformed path: %d %q", resp.Status, failure)
	}
	defer func(h Handler) { handler = h }(handler)
	handler = HandlerFunc(func(ResponseWriter, *Request) {})
	if _, failure := serveRequest([]byte{1, 2, 3}); !strings.Contains(failure, "malformed request") {
		t.Errorf("a malformed payload failed with %q", failure)
	}
}

func TestRun(t *testing.T) {
	for want, f := range map[string]func() error{
		"":                                    func() error { return nil },
		"no table":                            func() error { return errors.New("no table") },
		"panic: boom":                         func() error { panic("boom") },
		"the hook failed with an empty error": func() error { return errors.New("") },
	} {
		if got := run(f); got != want {
			t.Errorf("run = %q, want %q", got, want)
		}
	}
}

func TestCallRoundTrip(t *testing.T) {
	req, err := NewRequest("", "/items/a%2Fb?x=1", []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-id", "7")
	got, err := abi.DecodeRequest(encodeCall(req))
	want := abi.Request{Method: "GET", Path: "/items/a%2Fb?x=1", Headers: []abi.Header{{Name: "X-Id", Value: "7"}}, Body: []byte("hi")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("encodeCall = %+v, %v", got, err)
	}
	if _, err := NewRequest("GET", "items", nil); err == nil {
		t.Error("NewRequest accepted a path without /")
	}
	resp, err := decodeResponse(abi.AppendResponse(nil, &abi.Response{Status: 409, Headers: []abi.Header{{Name: "etag", Value: "1"}}, Body: []byte("x")}))
	if err != nil || resp.StatusCode != 409 || resp.Header.Get("ETag") != "1" || string(resp.Body) != "x" {
		t.Errorf("decodeResponse = %+v, %v", resp, err)
	}
}

// A request's header values share one backing array: a name sent twice
// keeps both values in order, and adding to one name's values leaves the
// others alone.
func TestHeaderOfSharedValues(t *testing.T) {
	h := headerOf([]abi.Header{{Name: "x-a", Value: "1"}, {Name: "B", Value: "2"}, {Name: "X-A", Value: "3"}, {Name: "C", Value: "4"}})
	want := Header{"X-A": {"1", "3"}, "B": {"2"}, "C": {"4"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("headerOf = %v, want %v", h, want)
	}
	h.Add("B", "5")
	h.Add("B", "6")
	if !reflect.DeepEqual(h["C"], []string{"4"}) || !reflect.DeepEqual(h["B"], []string{"2", "5", "6"}) {
		t.Errorf("after Add: %v", h)
	}
}

// A handler that sets no header still gets its body's default content
// type, and one that reads Header without setting anything sends none.
func TestResponseHeaderMadeOnDemand(t *testing.T) {
	resp, _ := serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, r *Request) { w.Write([]byte("hi")) })
	if got := header(resp)["Content-Type"]; !reflect.DeepEqual(got, []string{"text/plain; charset=utf-8"}) {
		t.Errorf("Content-Type %v", got)
	}
	resp, _ = serve(t, abi.Request{Method: "GET", Path: "/"}, func(w ResponseWriter, r *Request) { _ = w.Header().Get("X") })
	if len(resp.Headers) != 0 {
		t.Errorf("headers %v, want none", resp.Headers)
	}
}
