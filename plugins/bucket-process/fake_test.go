package processbucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// The test binary doubles as a provider: run with testProviderEnv set, it
// serves the fake bucket below (see TestMain). The fake is only for what
// the shared suite cannot reach: errors of every kind, calls that block,
// protocol versions. The real provider (cmd/wasmkeep-bucket-fs) runs the
// suite.
const testProviderEnv = "PROCESSBUCKET_TEST_PROVIDER"

// serveTestProvider serves the fake; mode "v2" speaks protocol version 2.
func serveTestProvider(mode string) {
	info := fakeInfo()
	if mode == "v2" {
		serve(info, 2)
		return
	}
	Serve(info)
}

type fakeConfig struct {
	Greeting string        `koanf:"greeting"` // printed at start, to check the node's log gets it
}

func fakeInfo() plugin.Info {
	return plugin.Info{
		Kind: plugin.Bucket, Name: "fake", API: bucket.API,
		NewConfig: func() any { return &fakeConfig{} },
		New: func(c any) (any, error) {
			cfg := c.(*fakeConfig)
			if cfg.Greeting != "" {
				fmt.Fprintln(os.Stderr, cfg.Greeting)
			}
			return &fake{objects: map[string]fakeObject{}}, nil
		},
	}
}

// errorKeys: Get of "err/NAME" fails with that error, wrapped.
var errorKeys = map[string]error{
	"notfound":     bucket.ErrNotFound,
	"precondition": bucket.ErrPrecondition,
	"transient":    bucket.ErrTransient,
	"range":        bucket.ErrRange,
	"invalidkey":   bucket.ErrInvalidKey,
	"canceled":     context.Canceled,
	"deadline":     context.DeadlineExceeded,
	"other":        errors.New("disk on fire"),
}

type fakeObject struct {
	data    []byte
	version int
}

type fake struct {
	mu      sync.Mutex
	objects map[string]fakeObject
	next    int
	// blockedErr is why the last "block" read stopped: the context's error
	// as the provider saw it.
	blockedErr string
}

func (f *fake) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if name, ok := strings.CutPrefix(key, "err/"); ok {
		return nil, fmt.Errorf("fake get %q: %w", key, errorKeys[name])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch key {
	case "block": // a chunk, then nothing until the call ends
		return &bucket.Object{Body: &blockingBody{f: f, ctx: ctx}, Size: 1 << 30, Version: "1"}, nil
	case "blocked-err":
		return &bucket.Object{Body: io.NopCloser(strings.NewReader(f.blockedErr)), Version: "1"}, nil
	}
	o, ok := f.objects[key]
	if !ok {
		return nil, fmt.Errorf("fake get %q: %w", key, bucket.ErrNotFound)
	}
	data := o.data[opts.Offset:]
	if opts.Length > 0 {
		data = data[:min(int64(len(data)), opts.Length)]
	}
	return &bucket.Object{
		Body: io.NopCloser(bytes.NewReader(data)), Size: int64(len(o.data)),
		Version: bucket.Version(strconv.Itoa(o.version)), ModTime: time.Unix(1700000000, 123),
	}, nil
}

type blockingBody struct {
	f    *fake
	ctx  context.Context
	sent bool
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, bytes.Repeat([]byte("x"), chunkSize)), nil
	}
	<-b.ctx.Done()
	b.f.mu.Lock()
	b.f.blockedErr = b.ctx.Err().Error()
	b.f.mu.Unlock()
	return 0, b.ctx.Err()
}

func (b *blockingBody) Close() error { return nil }

func (f *fake) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return "", fmt.Errorf("fake put %q: %w", key, err)
	}
	if int64(len(data)) != size {
		return "", fmt.Errorf("fake put %q: body of %d bytes, want %d", key, len(data), size)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o, exists := f.objects[key]
	if cond.IfAbsent && exists || cond.IfVersion != "" && (!exists || string(cond.IfVersion) != strconv.Itoa(o.version)) {
		return "", fmt.Errorf("fake put %q: %w", key, bucket.ErrPrecondition)
	}
	f.next++
	f.objects[key] = fakeObject{data: data, version: f.next}
	return bucket.Version(strconv.Itoa(f.next)), nil
}

func (f *fake) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, exists := f.objects[key]
	if !exists {
		return fmt.Errorf("fake delete %q: %w", key, bucket.ErrNotFound)
	}
	if cond.IfVersion != "" && string(cond.IfVersion) != strconv.Itoa(o.version) {
		return fmt.Errorf("fake delete %q: %w", key, bucket.ErrPrecondition)
	}
	delete(f.objects, key)
	return nil
}

func (f *fake) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objects {
		if strings.HasPrefix(k, prefix) && k > opts.StartAfter {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var page bucket.ListPage
	if opts.Limit > 0 && len(keys) > opts.Limit {
		keys = keys[:opts.Limit]
		page.Next = keys[len(keys)-1]
	}
	for _, k := range keys {
		o := f.objects[k]
		page.Entries = append(page.Entries, bucket.Entry{
			Key: k, Size: int64(len(o.data)), Version: bucket.Version(strconv.Itoa(o.version)), ModTime: time.Unix(1700000000, 123),
		})
	}
	return page, nil
}

func (f *fake) Close() error { return nil }
