package s3bucket_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	s3bucket "github.com/wasmkeep/wasmkeep/plugins/bucket-s3"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-s3/s3test"
)

var ctx = context.Background()

func put(t *testing.T, b bucket.Bucket, key, body string, cond bucket.Condition) (bucket.Version, error) {
	t.Helper()
	return b.Put(ctx, key, strings.NewReader(body), int64(len(body)), cond)
}

func mustPut(t *testing.T, b bucket.Bucket, key, body string, cond bucket.Condition) bucket.Version {
	t.Helper()
	v, err := put(t, b, key, body, cond)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return v
}

// read returns the object's body and version, "" and ErrNotFound if absent.
func read(t *testing.T, b bucket.Bucket, key string) (string, bucket.Version) {
	t.Helper()
	o, err := b.Get(ctx, key, bucket.GetOptions{})
	if errors.Is(err, bucket.ErrNotFound) {
		return "", ""
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer o.Body.Close()
	data, err := io.ReadAll(o.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(data), o.Version
}

func open(t *testing.T, cfg *s3bucket.Config) bucket.Bucket {
	t.Helper()
	b, err := s3bucket.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// A prefix keeps the keys under it: two prefixes of one bucket are two
// buckets to their users.
func TestPrefix(t *testing.T) {
	srv := s3test.Start(t)
	name := srv.NewBucket(t)
	whole := open(t, srv.Config(name))
	cfgA, cfgB := srv.Config(name), srv.Config(name)
	cfgA.Prefix, cfgB.Prefix = "cluster-a", "cluster-b/"
	a, b := open(t, cfgA), open(t, cfgB)

	mustPut(t, a, "nodes/n1", "a's", bucket.Condition{IfAbsent: true})
	mustPut(t, b, "nodes/n1", "b's", bucket.Condition{IfAbsent: true})
	if got, _ := read(t, a, "nodes/n1"); got != "a's" {
		t.Fatalf("a reads %q", got)
	}
	page, err := whole.List(ctx, "", bucket.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range page.Entries {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, " ") != "cluster-a/nodes/n1 cluster-b/nodes/n1" {
		t.Fatalf("the bucket holds %q", keys)
	}
	page, err = b.List(ctx, "nodes/", bucket.ListOptions{StartAfter: ""})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Key != "nodes/n1" {
		t.Fatalf("b lists %+v, %v", page, err)
	}
	page, err = b.List(ctx, "", bucket.ListOptions{StartAfter: "nodes/n1"})
	if err != nil || len(page.Entries) != 0 {
		t.Fatalf("b lists after its only key: %+v, %v", page, err)
	}
}

// Keys that look like s3blob's escapes ("__0x<hex>__") round-trip, list in
// byte order and page with StartAfter and prefixes like any other.
func TestEscapeLikeKeys(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config(srv.NewBucket(t))
	cfg.Prefix = "p__0x41__"
	b := open(t, cfg)
	keys := []string{"a__0x60", "a__0x7e__", "a__0x41__", "a__0x41__b", "a__0x", "a__0x~", "a__0x~~", "a__0x5f__0x41__", "a__1", "a_b", "a__0"}
	for _, k := range keys {
		mustPut(t, b, k, k, bucket.Condition{IfAbsent: true})
		if got, _ := read(t, b, k); got != k {
			t.Fatalf("%s reads %q", k, got)
		}
	}
	slices.Sort(keys)
	list := func(prefix, after string) []string {
		page, err := b.List(ctx, prefix, bucket.ListOptions{StartAfter: after})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page.Entries {
			got = append(got, e.Key)
		}
		return got
	}
	if got := list("", ""); !slices.Equal(got, keys) {
		t.Fatalf("listed %q, want %q", got, keys)
	}
	for i, k := range keys {
		if got := list("a", k); !slices.Equal(got, keys[i+1:]) {
			t.Fatalf("listed after %s: %q, want %q", k, got, keys[i+1:])
		}
	}
	if got, want := list("a__0x4", ""), []string{"a__0x41__", "a__0x41__b"}; !slices.Equal(got, want) {
		t.Fatalf("listed under a__0x4: %q, want %q", got, want)
	}
}

// keyOfLen is a valid key of n bytes (n >= 1): segments "abc", then one of
// 1 to 4 bytes.
func keyOfLen(n int) string {
	return strings.Repeat("abc/", (n-1)/4) + strings.Repeat("z", n-4*((n-1)/4))
}

// S3 holds keys of at most 1,024 bytes, the bucket's prefix and s3blob's
// escapes included. The longest prefix (64 bytes with its /) leaves room
// for the kernel's longest key; s3blob's escape of the "/" in "../" (7 bytes
// more each) can still pass the limit, and such a key is ErrInvalidKey naming
// the key and the limit, as the contract's own key rule is, before any
// request. A key that fits round-trips.
func TestKeyTooLongForS3(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config(srv.NewBucket(t))
	cfg.Prefix = strings.Repeat("p", bucket.MaxPrefixLen-1)
	b := open(t, cfg)
	escaped := func(n int) string { return "a../" + keyOfLen(n-4) } // n bytes, 7 more on the store
	for _, k := range []string{keyOfLen(bucket.MaxKeyLen), escaped(bucket.MaxKeyLen - 7)} {
		mustPut(t, b, k, "fits", bucket.Condition{IfAbsent: true})
		if got, _ := read(t, b, k); got != "fits" {
			t.Errorf("%d-byte key reads %q", len(k), got)
		}
		page, err := b.List(ctx, k[:len(k)-1], bucket.ListOptions{})
		if err != nil || len(page.Entries) != 1 || page.Entries[0].Key != k {
			t.Errorf("listing the %d-byte key: %+v, %v", len(k), page, err)
		}
	}
	for _, k := range []string{escaped(bucket.MaxKeyLen - 6), escaped(bucket.MaxKeyLen)} {
		if err := bucket.CheckKey(k); err != nil {
			t.Fatal(err)
		}
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, bucket.ErrInvalidKey) || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), "at most 1024") {
				t.Errorf("%s of a %d-byte key holding ../: %v, want ErrInvalidKey naming it and the limit", op, len(k), err)
			}
		}
		_, err := put(t, b, k, "long", bucket.Condition{IfAbsent: true})
		check("Put", err)
		_, err = b.Get(ctx, k, bucket.GetOptions{})
		check("Get", err)
		check("Delete", b.Delete(ctx, k, bucket.Condition{}))
		// No key the store holds is under it: the listing is empty.
		page, err := b.List(ctx, k, bucket.ListOptions{})
		if err != nil || len(page.Entries) != 0 {
			t.Errorf("List under a %d-byte prefix: %+v, %v", len(k), page, err)
		}
	}
}

// A body above the transfer manager's 16 MiB threshold goes up in parts,
// and its condition rides on the completion: never an unconditional write.
func TestMultipartConditions(t *testing.T) {
	b := s3test.Start(t).Open(t)
	big := func(fill byte) *bytes.Reader { return bytes.NewReader(bytes.Repeat([]byte{fill}, 20<<20)) }
	const n = 20 << 20

	v1, err := b.Put(ctx, "big", big('a'), n, bucket.Condition{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "big", big('b'), n, bucket.Condition{IfAbsent: true}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("multipart create over an object: %v, want ErrPrecondition", err)
	}
	v2, err := b.Put(ctx, "big", big('c'), n, bucket.Condition{IfVersion: v1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "big", big('d'), n, bucket.Condition{IfVersion: v1}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("multipart replace at a stale version: %v, want ErrPrecondition", err)
	}
	o, err := b.Get(ctx, "big", bucket.GetOptions{Offset: n - 3})
	if err != nil {
		t.Fatal(err)
	}
	tail, _ := io.ReadAll(o.Body)
	o.Body.Close()
	if string(tail) != "ccc" || o.Version != v2 || o.Size != n {
		t.Fatalf("read back %q, version %s (put gave %s), size %d", tail, o.Version, v2, o.Size)
	}
}

// faultyProxy sits between the plugin and VersityGW and spoils answers:
// fail(r) says what to do with each request.
type faultyProxy struct {
	*httptest.Server
	mu   sync.Mutex
	fail func(r *http.Request, n int) fault // n counts requests by method and path
	seen map[string]int
}

type fault int

const (
	pass         fault = iota
	answerLost         // forwarded, applied, then a 500 instead of the answer
	neverForward       // a 500, and the store never sees it
	refused            // a 412, and the store never sees it
)

func newProxy(t *testing.T, upstream string, fail func(r *http.Request, n int) fault) *faultyProxy {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultyProxy{fail: fail, seen: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		id := r.Method + " " + r.URL.Path
		p.seen[id]++
		f := p.fail(r, p.seen[id])
		p.mu.Unlock()
		switch f {
		case answerLost:
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			fallthrough
		case neverForward:
			http.Error(w, "<Error><Code>InternalError</Code><Message>spoiled by the test</Message></Error>", http.StatusInternalServerError)
		case refused:
			http.Error(w, "<Error><Code>PreconditionFailed</Code><Message>made by the test</Message></Error>", http.StatusPreconditionFailed)
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

// A conditional write whose first try landed but whose answer was lost is
// retried, and the retry's 412 is recognised as the write's own doing: the
// caller sees success and the version that is there (ADR 1012).
func TestRetriedConditionalWrites(t *testing.T) {
	srv := s3test.Start(t)
	name := srv.NewBucket(t)
	direct := open(t, srv.Config(name))
	// The first PUT and DELETE of each key land, and their answer is lost.
	proxy := newProxy(t, srv.Endpoint, func(r *http.Request, n int) fault {
		if (r.Method == http.MethodPut || r.Method == http.MethodDelete) && n == 1 {
			return answerLost
		}
		return pass
	})
	cfg := srv.Config(name)
	cfg.Endpoint = proxy.URL
	b := open(t, cfg)

	v1, err := put(t, b, "lease", "mine", bucket.Condition{IfAbsent: true})
	if err != nil {
		t.Fatalf("create whose answer was lost: %v", err)
	}
	if got, v := read(t, direct, "lease"); got != "mine" || v != v1 {
		t.Fatalf("the store holds %q at %s, put said %s", got, v, v1)
	}
	v2, err := put(t, b, "lease", "renewed", bucket.Condition{IfVersion: v1})
	if err != nil {
		t.Fatalf("replace whose answer was lost: %v", err)
	}
	if got, v := read(t, direct, "lease"); got != "renewed" || v != v2 {
		t.Fatalf("the store holds %q at %s, put said %s", got, v, v2)
	}

	// Another writer's object is still refused, after the same retries.
	mustPut(t, direct, "theirs", "theirs", bucket.Condition{})
	proxy.fail = func(r *http.Request, n int) fault {
		if r.Method == http.MethodPut && n == 1 {
			return neverForward
		}
		return pass
	}
	if _, err := put(t, b, "theirs", "mine", bucket.Condition{IfAbsent: true}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("create over another writer's object, retried: %v, want ErrPrecondition", err)
	}
	if got, _ := read(t, direct, "theirs"); got != "theirs" {
		t.Fatalf("the other writer's object became %q", got)
	}

	// A conditional delete whose answer was lost, and whose retry is
	// refused (as a store may answer If-Match on a missing key): the key is
	// gone, so is the version.
	proxy.fail = func(r *http.Request, n int) fault {
		switch {
		case r.Method == http.MethodDelete && n == 1:
			return answerLost
		case r.Method == http.MethodDelete:
			return refused
		}
		return pass
	}
	if err := b.Delete(ctx, "lease", bucket.Condition{IfVersion: v2}); err != nil {
		t.Fatalf("delete whose answer was lost: %v", err)
	}
	if got, _ := read(t, direct, "lease"); got != "" {
		t.Fatalf("lease still holds %q", got)
	}
}

// A store that does not answer is a transient fault, within the bounds of
// request_timeout and max_attempts, never a hang.
func TestUnreachable(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close() // connections refused

	srv := s3test.Start(t)
	for _, tc := range []struct{ name, addr, says string }{
		{"silent", silent.Addr().String(), "no answer within 200ms (request_timeout)"},
		{"refused", closed.Addr().String(), "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srv.Config("any")
			cfg.Endpoint = "http://" + tc.addr
			cfg.RequestTimeout = 200 * time.Millisecond
			cfg.MaxAttempts = 3
			b := open(t, cfg)
			for _, op := range []struct {
				name string
				do   func() error
			}{
				{"get", func() error { _, err := b.Get(ctx, "k", bucket.GetOptions{}); return err }},
				{"put", func() error { _, err := put(t, b, "k", "v", bucket.Condition{IfAbsent: true}); return err }},
				{"delete", func() error { return b.Delete(ctx, "k", bucket.Condition{}) }},
				{"list", func() error { _, err := b.List(ctx, "", bucket.ListOptions{}); return err }},
			} {
				done := make(chan error, 1)
				go func() { done <- op.do() }()
				select {
				case err := <-done:
					if !errors.Is(err, bucket.ErrTransient) || !strings.Contains(err.Error(), tc.says) {
						t.Fatalf("%s: %v, want ErrTransient saying %q", op.name, err, tc.says)
					}
				case <-time.After(30 * time.Second): // 3 tries of 200ms and 2 backoffs of 2s at most
					t.Fatalf("%s still waiting after 30s", op.name)
				}
			}
		})
	}
}

// A GET whose body stops sending ends after request_timeout with a
// transient fault.
func TestStalledBody(t *testing.T) {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"abc"`)
		w.Header().Set("Content-Length", "10")
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("abc"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer stall.Close()
	srv := s3test.Start(t)
	cfg := srv.Config("any")
	cfg.Endpoint = stall.URL
	cfg.RequestTimeout = 300 * time.Millisecond
	b := open(t, cfg)
	o, err := b.Get(ctx, "k", bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Body.Close()
	data, err := io.ReadAll(o.Body)
	if string(data) != "abc" || !errors.Is(err, bucket.ErrTransient) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("read %q, %v; want abc, then ErrTransient", data, err)
	}
}

// A store refusing the credentials says so, and it is no transient fault.
func TestWrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config(srv.NewBucket(t))
	cfg.Credentials = credentials.NewStaticCredentialsProvider(srv.AccessKey, "wrong", "")
	b := open(t, cfg)
	_, err := b.Get(ctx, "k", bucket.GetOptions{})
	if err == nil || errors.Is(err, bucket.ErrTransient) || errors.Is(err, bucket.ErrNotFound) || !strings.Contains(err.Error(), "access denied: check the credentials") {
		t.Fatalf("get with a wrong secret: %v", err)
	}
	cfg = srv.Config("no-such-bucket")
	b = open(t, cfg)
	_, err = b.Get(ctx, "k", bucket.GetOptions{})
	if err == nil || errors.Is(err, bucket.ErrNotFound) || !strings.Contains(err.Error(), "the bucket does not exist") {
		t.Fatalf("get from a missing bucket: %v", err)
	}
}
