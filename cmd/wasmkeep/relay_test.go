package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/app"
)

// bucketRelay stands between a node's bucket-s3 and the S3 server on
// loopback and can hold the requests a rule picks: the tests' way to make
// uploads or reads hang while everything else reaches the store.
//
// It relays HTTP requests rather than bytes because it must tell a segment
// upload or an object read (keys under actors/) from the node lease's
// writes and the ownership records, which must keep landing: under a
// blanket stall the lease (1 s in these tests) lapses within a second, and
// the test would see the lapse's refusals instead of a held upload or a
// restore's bounded reads. A bucket-process provider that holds writes on
// a signal would need a provider binary of the tests' own, and --bucket's
// URL cannot pick it. Each request is forwarded as it came, its Host too
// (the request is signed with the relay's address).
//
// A held request never reaches the store: it waits until Release or until
// its client gives up, then its connection is cut. So a held upload is
// one lost with its node (the node is killed while it waits), and a held
// read is a bucket that never answers.
type bucketRelay struct {
	URL  string // http://127.0.0.1:PORT, the node's AWS_ENDPOINT
	held atomic.Int64
	lost atomic.Int64 // replies lost

	mu       sync.Mutex
	rule     func(*http.Request) bool // nil: hold nothing
	released chan struct{}
	lose     func(*http.Request) bool // nil: lose no reply
	every    int64
	seen     int64
	slow     func(*http.Request) bool // nil: delay nothing
	delay    time.Duration
}

// startRelay relays to the S3 server at target until the test ends.
func startRelay(t *testing.T, target string) *bucketRelay {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(to)
			r.Out.Host = r.In.Host
		},
		// No Accept-Encoding of the relay's own: bodies pass as they are.
		Transport:    &http.Transport{DisableCompression: true},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &bucketRelay{URL: "http://" + l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if released := r.holds(req); released != nil {
			r.held.Add(1)
			// Read the body first: only then does the server notice the
			// client going away (a cut attempt, a killed node).
			io.Copy(io.Discard, req.Body)
			select {
			case <-released:
			case <-req.Context().Done():
			}
			panic(http.ErrAbortHandler) // the connection is cut, no answer
		}
		if d := r.delayOf(req); d > 0 {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return
			}
		}
		if r.losing(req) {
			// The store gets the request and applies it; its answer
			// never reaches the client.
			proxy.ServeHTTP(httptest.NewRecorder(), req)
			r.lost.Add(1)
			panic(http.ErrAbortHandler)
		}
		proxy.ServeHTTP(w, req)
	})}
	go srv.Serve(l)
	t.Cleanup(func() {
		r.Release()
		srv.Close()
	})
	return r
}

// holds returns the channel a request the rule picks waits on; nil for a
// request to relay.
func (r *bucketRelay) holds(req *http.Request) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rule == nil || !r.rule(req) {
		return nil
	}
	return r.released
}

// losing reports whether the reply to req is to be lost.
func (r *bucketRelay) losing(req *http.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lose == nil || !r.lose(req) {
		return false
	}
	r.seen++
	return r.seen%r.every == 0
}

// LoseReplies relays every request rule picks to the store and, for one
// in every of them, cuts the connection instead of relaying the answer:
// a write that landed with its reply lost.
func (r *bucketRelay) LoseReplies(rule func(*http.Request) bool, every int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lose, r.every, r.seen = rule, every, 0
}

// Delay relays every request rule picks d late: a slow bucket that still
// answers.
func (r *bucketRelay) Delay(rule func(*http.Request) bool, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slow, r.delay = rule, d
}

func (r *bucketRelay) delayOf(req *http.Request) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slow == nil || !r.slow(req) {
		return 0
	}
	return r.delay
}

// Hold holds every request rule picks from now until Release.
func (r *bucketRelay) Hold(rule func(*http.Request) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rule, r.released = rule, make(chan struct{})
}

// Release lets requests through again and cuts the held ones.
func (r *bucketRelay) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rule != nil {
		close(r.released)
	}
	r.rule = nil
}

// actorObjects picks the requests of a method for objects under actors/
// of the default app's state root (path-style: /BUCKET/state/default/default/actors/...): PUT, the segments' and
// snapshots' uploads; GET, a restore's reads (a listing is a GET of the
// bucket itself, /BUCKET?list-type=2, and passes).
func actorObjects(bucketName, method string) func(*http.Request) bool {
	return func(req *http.Request) bool {
		return req.Method == method && strings.HasPrefix(req.URL.Path, "/"+bucketName+"/"+app.Default.StateRoot()+"actors/")
	}
}
