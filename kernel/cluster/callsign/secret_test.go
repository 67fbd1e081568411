package callsign

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

func put(t *testing.T, b bucket.Bucket, body []byte) {
	t.Helper()
	if _, err := b.Put(context.Background(), SecretKey, bytes.NewReader(body), int64(len(body)), bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
}

func stored(t *testing.T, b bucket.Bucket) *bucket.Object {
	t.Helper()
	o, err := b.Get(context.Background(), SecretKey, bucket.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The first load creates the secret; later ones, from this node or another,
// read the same one, and it is never written again.
func TestLoadSecretCreatedOnce(t *testing.T) {
	ctx := context.Background()
	b := buckettest.NewMemory(buckettest.Flaws{})
	s1, err := LoadSecret(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s1.key) != secretLen || bytes.Equal(s1.key, make([]byte, secretLen)) {
		t.Fatalf("key %x", s1.key)
	}
	o := stored(t, b)
	body, _ := io.ReadAll(o.Body)
	o.Body.Close()
	if !bytes.HasPrefix(body, []byte("wasmkeep-secret 1\n")) || len(body) != len("wasmkeep-secret 1\n")+65 {
		t.Errorf("stored as %q", body)
	}
	s2, err := LoadSecret(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s1.key, s2.key) {
		t.Error("a second load read another secret")
	}
	if stored(t, b).Version != o.Version {
		t.Error("a second load wrote the secret again")
	}
	// A call signed under one load verifies under the other.
	c := sample()
	if _, _, err := verify(NewVerifier(s2, "node-b", clock.NewManual(start), 0), c, signed(s1, start, c)); err != nil {
		t.Fatal(err)
	}
	// Another bucket, another cluster: another secret.
	s3, err := LoadSecret(ctx, buckettest.NewMemory(buckettest.Flaws{}))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(s1.key, s3.key) {
		t.Error("two buckets got the same secret")
	}
}

// gate holds every Get of the secret until n of them are waiting, so that
// n loaders all find it absent and race to create it.
type gate struct {
	bucket.Bucket
	mu      sync.Mutex
	waiting int
	n       int
	open    chan struct{}
	puts    int
}

func (g *gate) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	o, err := g.Bucket.Get(ctx, key, opts)
	g.mu.Lock()
	g.waiting++
	if g.waiting == g.n {
		close(g.open)
	}
	g.mu.Unlock()
	<-g.open
	return o, err
}

func (g *gate) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	g.mu.Lock()
	g.puts++
	g.mu.Unlock()
	return g.Bucket.Put(ctx, key, body, size, cond)
}

// Nodes starting together each find the secret absent and try to create
// it: one create lands, the others are refused and read it.
func TestLoadSecretConcurrent(t *testing.T) {
	const n = 8
	g := &gate{Bucket: buckettest.NewMemory(buckettest.Flaws{}), n: n, open: make(chan struct{})}
	keys := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := LoadSecret(context.Background(), g)
			if err != nil {
				t.Error(err)
			}
			keys[i] = s.key
		})
	}
	wg.Wait()
	if g.puts != n {
		t.Errorf("%d creates tried, want %d: the loaders did not race", g.puts, n)
	}
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) || keys[i] == nil {
			t.Fatalf("loader %d got another secret", i)
		}
	}
	o := stored(t, g.Bucket)
	defer o.Body.Close()
	body, _ := io.ReadAll(o.Body)
	if s, err := parseSecret(body); err != nil || !bytes.Equal(s.key, keys[0]) {
		t.Errorf("the loaders' secret is not the stored one (%v)", err)
	}
}

func TestLoadSecretMalformed(t *testing.T) {
	good := string(encodeSecret(bytes.Repeat([]byte{0xab}, secretLen)))
	hexKey := strings.Repeat("ab", secretLen)
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"as written", good, true},
		{"no final newline", strings.TrimSuffix(good, "\n"), true},
		{"upper-case hex", "wasmkeep-secret 1\n" + strings.ToUpper(hexKey) + "\n", true},
		{"empty", "", false},
		{"another format", "wasmkeep-secret 2\n" + hexKey + "\n", false},
		{"no header", hexKey + "\n", false},
		{"header only", "wasmkeep-secret 1\n", false},
		{"short key", "wasmkeep-secret 1\n" + hexKey[2:] + "\n", false},
		{"long key", "wasmkeep-secret 1\n" + hexKey + "ab\n", false},
		{"not hex", "wasmkeep-secret 1\n" + strings.Repeat("zz", secretLen) + "\n", false},
		{"a third line", good + "more\n", false},
		{"two final newlines", good + "\n", false},
		{"CRLF", "wasmkeep-secret 1\r\n" + hexKey + "\r\n", false},
		{"huge", good + strings.Repeat("x", 2<<10), false},
	} {
		b := buckettest.NewMemory(buckettest.Flaws{})
		put(t, b, []byte(tc.body))
		s, err := LoadSecret(context.Background(), b)
		if tc.ok {
			if err != nil || !bytes.Equal(s.key, bytes.Repeat([]byte{0xab}, secretLen)) {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrMalformedSecret) {
			t.Errorf("%s: got %v, want ErrMalformedSecret", tc.name, err)
			continue
		}
		if strings.Contains(err.Error(), "abab") {
			t.Errorf("%s: the error quotes the object: %v", tc.name, err)
		}
		if s.key != nil {
			t.Errorf("%s: a key came with the error", tc.name)
		}
		// The object is left as it is: a node never replaces a secret.
		o := stored(t, b)
		body, _ := io.ReadAll(o.Body)
		o.Body.Close()
		if string(body) != tc.body {
			t.Errorf("%s: the object was changed", tc.name)
		}
	}
}

// A bucket that fails is reported as it failed, not as a malformed
// secret: the caller retries.
func TestLoadSecretBucketDown(t *testing.T) {
	_, err := LoadSecret(context.Background(), buckettest.NewMemory(buckettest.Flaws{Unreachable: true}))
	if !errors.Is(err, bucket.ErrTransient) || errors.Is(err, ErrMalformedSecret) {
		t.Fatalf("got %v, want the bucket's ErrTransient", err)
	}
}

// lostReply is a bucket whose creates land but whose replies are lost.
type lostReply struct{ bucket.Bucket }

func (l lostReply) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if _, err := l.Bucket.Put(ctx, key, body, size, cond); err != nil {
		return "", err
	}
	return "", bucket.ErrTransient
}

// A create whose reply was lost is an error, never a secret the bucket
// may not hold; the next load reads the one that landed.
func TestLoadSecretLostReply(t *testing.T) {
	ctx := context.Background()
	b := lostReply{buckettest.NewMemory(buckettest.Flaws{})}
	if s, err := LoadSecret(ctx, b); !errors.Is(err, bucket.ErrTransient) || s.key != nil {
		t.Fatalf("got %v, %v; want the bucket's ErrTransient and no secret", s, err)
	}
	s1, err := LoadSecret(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := LoadSecret(ctx, b.Bucket)
	if err != nil || !bytes.Equal(s1.key, s2.key) {
		t.Fatalf("a retry read another secret than the stored one (%v)", err)
	}
}
