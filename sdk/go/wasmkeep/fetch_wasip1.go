package wasmkeep

import (
	"time"
	"unsafe"
)

//go:wasmimport wasmkeep http_fetch
func httpFetch(req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) int32

// Fetch sends r, built with FetchRequest, to a public HTTP server and waits
// for the whole response. Each step (connect, first byte, each next byte)
// may take 30 s. Redirects are not followed: a 3xx is the Response. Errors
// are *FetchError.
func Fetch(r *Request) (*Response, error) { return FetchWithTimeout(r, 0) }

// FetchWithTimeout is Fetch with another per-step timeout, at most 60 s
// (0 for the default of 30 s).
func FetchWithTimeout(r *Request, step time.Duration) (*Response, error) {
	ms := min(step.Milliseconds(), 60_000)
	switch {
	case step < 0:
		ms = 0
	case step > 0 && ms == 0:
		ms = 1 // a timeout under a millisecond still is not the default
	}
	req, err := encodeFetch(r, uint32(ms))
	if err != nil {
		return nil, err
	}
	o, oc := out()
	b, ok := result(httpFetch(ptr(req), uint32(len(req)), o, oc), true)
	if !ok {
		return nil, decodeFetchError(b)
	}
	return decodeResponse(b)
}
