package wasmkeep

import (
	"errors"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// FetchErrorKind says why Fetch failed.
type FetchErrorKind = abi.FetchErrorKind

const (
	FetchInvalidRequest          = abi.FetchInvalidRequest          // not an absolute http or https URL, or a bad method or header
	FetchDestinationIPProhibited = abi.FetchDestinationIPProhibited // the address is not public (loopback, private, link-local, ...)
	FetchHTTPRequestDenied       = abi.FetchHTTPRequestDenied       // the port is one the Fetch standard blocks
	FetchDNSError                = abi.FetchDNSError                // the name does not resolve to a public address
	FetchConnectionRefused       = abi.FetchConnectionRefused
	FetchTimeout                 = abi.FetchTimeout // a step (connect, first byte, next byte) or the event's wall clock ran out
	FetchTLSError                = abi.FetchTLSError
	FetchTooLarge                = abi.FetchTooLarge        // the request or response body is over 16 MB
	FetchTooManyRequests         = abi.FetchTooManyRequests // the node has too many outbound requests in flight
	FetchFailed                  = abi.FetchFailed
)

// FetchError is the error of Fetch; find it with errors.As. A server that
// answers, even with a 500 or a redirect, is a Response, not a FetchError.
type FetchError struct {
	Kind    FetchErrorKind
	Message string
}

func (e *FetchError) Error() string {
	if e.Message == "" {
		return "fetch " + e.Kind.String()
	}
	return "fetch " + e.Kind.String() + ": " + e.Message
}

func decodeFetchError(b []byte) *FetchError {
	var r abi.Reader
	r.Reset(b)
	return &FetchError{Kind: FetchErrorKind(r.U8()), Message: string(r.Rest())}
}

var errFetchURL = errors.New("wasmkeep: a fetch URL must be absolute: http:// or https://, a host, then an optional path and query")

// FetchRequest returns a request for Fetch. rawURL is an absolute http or
// https URL, encoded; a fragment is dropped.
func FetchRequest(method, rawURL string, body []byte) (*Request, error) {
	rawURL, _, _ = strings.Cut(rawURL, "#")
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, errFetchURL
	}
	host, target := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		host, target = rest[:i], rest[i:]
	}
	if host == "" {
		return nil, errFetchURL
	}
	if target[0] == '?' {
		target = "/" + target
	}
	u, err := parseURL(target)
	if err != nil {
		return nil, err
	}
	u.Scheme, u.Host = scheme, host
	return &Request{Method: method, URL: u, Header: Header{}, Body: body}, nil
}

// encodeFetch encodes r and the per-step timeout in milliseconds.
func encodeFetch(r *Request, stepMillis uint32) ([]byte, error) {
	if r.URL == nil || r.URL.Scheme == "" || r.URL.Host == "" {
		return nil, errFetchURL
	}
	method := r.Method
	if method == "" {
		method = "GET"
	}
	target := r.URL.Scheme + "://" + r.URL.Host + r.URL.RequestURI()
	enc = abi.AppendRequest(enc[:0], &abi.Request{Method: method, Path: target, Headers: flatten(r.Header), Body: r.Body})
	enc = abi.AppendU32(enc, stepMillis)
	return enc, nil
}
