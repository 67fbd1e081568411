package wasmkeep

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// A Handler answers the requests sent to an actor, like net/http's Handler.
// WasmKeep runs one event at a time per actor, so ServeHTTP never runs
// concurrently with itself or with other hooks of the same actor.
type Handler interface {
	ServeHTTP(ResponseWriter, *Request)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ResponseWriter, *Request)

// ServeHTTP calls f(w, r).
func (f HandlerFunc) ServeHTTP(w ResponseWriter, r *Request) { f(w, r) }

// A ResponseWriter builds the response to a request, like net/http's.
type ResponseWriter interface {
	// Header is the response's header. Changing it after WriteHeader has
	// no effect.
	Header() Header
	// WriteHeader sets the status code. Only the first call counts; Write
	// without it means 200.
	WriteHeader(statusCode int)
	// Write appends to the body. The response is sent once the handler
	// returns; a non-empty body without a Content-Type is sent as
	// "text/plain; charset=utf-8" (there is no content sniffing).
	Write([]byte) (int, error)
}

// Request is an HTTP request to an actor: from a client, where URL holds
// what follows /actor/<class>/<name>, or from another actor (Call).
type Request struct {
	Method string
	URL    *URL
	Header Header
	Body   []byte // the whole body
}

// BodyReader returns a reader over Body, for APIs that want an io.Reader.
func (r *Request) BodyReader() *bytes.Reader { return bytes.NewReader(r.Body) }

// NewRequest returns a request for Call. target is an encoded path and
// query, starting with "/".
func NewRequest(method, target string, body []byte) (*Request, error) {
	u, err := parseURL(target)
	if err != nil {
		return nil, err
	}
	return &Request{Method: method, URL: u, Header: Header{}, Body: body}, nil
}

// Response is another actor's answer to Call.
type Response struct {
	StatusCode int
	Header     Header
	Body       []byte
}

// Error answers with the status code and msg as a plain-text body, like
// net/http's Error.
func Error(w ResponseWriter, msg string, code int) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append([]byte(msg), '\n'))
}

var handler Handler

// Handle sets the handler of the actor's requests. Call it from an init
// function: a module built with -buildmode=c-shared never runs main.
func Handle(h Handler) {
	if h == nil {
		panic("wasmkeep: Handle: nil handler")
	}
	if handler != nil {
		panic("wasmkeep: Handle: a handler is already set")
	}
	handler = h
}

// HandleFunc sets f as the handler of the actor's requests (see Handle).
func HandleFunc(f func(ResponseWriter, *Request)) {
	if f == nil {
		panic("wasmkeep: HandleFunc: nil function")
	}
	Handle(HandlerFunc(f))
}

// Buffers reused from one host call to the next, so that steady traffic
// allocates little. enc holds encoded parameters, requests and responses;
// body holds the response body being written.
var (
	enc   []byte
	body  []byte
	lines []abi.Header
)

// keepBuffer is the largest buffer kept between events: one large request
// should not pin its memory for the instance's lifetime.
const keepBuffer = 64 << 10

// release drops buffers that grew past keepBuffer; hooks call it last.
func release() {
	if cap(enc) > keepBuffer {
		enc = nil
	}
	if cap(body) > keepBuffer {
		body = nil
	}
	clear(lines[:cap(lines)]) // drop references to the last event's strings
}

// serveRequest runs the handler on an encoded Request and returns the
// encoded Response, or the message the failing hook reports.
func serveRequest(payload []byte) (resp []byte, failure string) {
	if handler == nil {
		return nil, "wasmkeep: no handler: call wasmkeep.Handle or HandleFunc in an init function (a c-shared module never runs main)"
	}
	q, err := abi.DecodeRequest(payload)
	if err != nil {
		return nil, "wasmkeep: malformed request from the host: " + err.Error()
	}
	w := &response{body: body[:0]}
	if u, err := parseURL(q.Path); err != nil {
		Error(w, "bad request: "+err.Error(), 400)
	} else {
		r := &Request{Method: q.Method, URL: u, Header: headerOf(q.Headers), Body: q.Body}
		failure = run(func() error {
			handler.ServeHTTP(w, r)
			return nil
		})
	}
	body = w.body[:0]
	if failure != "" {
		return nil, failure
	}
	return w.encode(), ""
}

// response is the ResponseWriter of serveRequest.
type response struct {
	header Header // made by the first call to Header: most handlers set none
	status int    // 0 until WriteHeader
	body   []byte
}

func (w *response) Header() Header {
	if w.status != 0 {
		return Header{} // as in net/http, changes after WriteHeader have no effect
	}
	if w.header == nil {
		w.header = Header{}
	}
	return w.header
}

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("wasmkeep: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.status == 0 {
		w.status = code
	}
}

func (w *response) Write(p []byte) (int, error) {
	w.WriteHeader(200)
	w.body = append(w.body, p...)
	return len(p), nil
}

// WriteString lets io.WriteString skip the conversion to []byte.
func (w *response) WriteString(s string) (int, error) {
	w.WriteHeader(200)
	w.body = append(w.body, s...)
	return len(s), nil
}

func (w *response) encode() []byte {
	if w.status == 0 {
		w.status = 200
	}
	if len(w.body) > 0 && w.header["Content-Type"] == nil {
		if w.header == nil {
			w.header = Header{}
		}
		w.header["Content-Type"] = []string{"text/plain; charset=utf-8"}
	}
	enc = abi.AppendResponse(enc[:0], &abi.Response{Status: w.status, Headers: flatten(w.header), Body: w.body})
	return enc
}

// encodeCall encodes r for actor_call into enc.
func encodeCall(r *Request) []byte {
	method, target := r.Method, "/"
	if method == "" {
		method = "GET"
	}
	if r.URL != nil {
		target = r.URL.RequestURI()
	}
	enc = abi.AppendRequest(enc[:0], &abi.Request{Method: method, Path: target, Headers: flatten(r.Header), Body: r.Body})
	return enc
}

// decodeResponse decodes actor_call's answer; b must not be reused, since
// the Body aliases it.
func decodeResponse(b []byte) (*Response, error) {
	s, err := abi.DecodeResponse(b)
	if err != nil {
		return nil, errors.New("wasmkeep: malformed response from the host: " + err.Error())
	}
	return &Response{StatusCode: s.Status, Header: headerOf(s.Headers), Body: s.Body}, nil
}

// headerOf converts header lines, which keep the case they were sent with,
// to a Header. The values of names seen once share one backing array, so a
// request costs two allocations here however many headers it has.
func headerOf(lines []abi.Header) Header {
	h := make(Header, len(lines))
	values := make([]string, len(lines))
	for i, l := range lines {
		key := CanonicalHeaderKey(l.Name)
		if vs, ok := h[key]; ok {
			h[key] = append(vs, l.Value) // capacity 1: a copy, values untouched
			continue
		}
		values[i] = l.Value
		h[key] = values[i : i+1 : i+1]
	}
	return h
}

// flatten lists h's values as header lines, one per value, in lines.
func flatten(h Header) []abi.Header {
	lines = lines[:0]
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, abi.Header{Name: k, Value: v})
		}
	}
	return lines
}
