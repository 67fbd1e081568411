package processbucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// The test binary doubles as a provider: run with testProviderEnv set, it
// serves the fake bucket below (see TestMain). The fake is only for what
// the shared suite cannot reach: errors of every kind, calls that block,
// protocol versions.
const testProviderEnv = "PROCESSBUCKET_TEST_PROVIDER"

// serveTestProvider serves the fake; mode "v2" speaks protocol version 2,
// "contract" serves it as bucket/v0 past Serve's check (a provider built
// with a kernel whose bucket contract is bucket/v0), "stale" passes a
// bucket/v0 plugin to Serve.
func serveTestProvider(mode string) {
	info := fakeInfo()
	switch mode {
	case "v2":
		serve(info, 2)
		return
	case "contract":
		info.API = "bucket/v0"
		serve(info, ProtocolVersion)
		return
	case "stale":
		info.API = "bucket/v0"
	}
	Serve(info)
}

type fakeConfig struct {
	Greeting string `koanf:"greeting"` // printed at start, to check the node's log gets it
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
			return &fake{Memory: buckettest.NewMemory(buckettest.Flaws{})}, nil
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

// fake is the suite's memory bucket with a few keys that misbehave.
type fake struct {
	*buckettest.Memory

	mu sync.Mutex
	// blocked is how the last "block-get" ended, as the provider saw it:
	// whether its context had a deadline, and its error.
	blocked string
}

func (f *fake) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if name, ok := strings.CutPrefix(key, "err/"); ok {
		return nil, fmt.Errorf("fake get %q: %w", key, errorKeys[name])
	}
	switch key {
	case "block": // a chunk, then nothing until the call ends
		return &bucket.Object{Body: &blockingBody{ctx: ctx}, Size: 1 << 30, Version: "1"}, nil
	case "block-get": // nothing until the call ends
		<-ctx.Done()
		_, deadline := ctx.Deadline()
		f.mu.Lock()
		f.blocked = fmt.Sprintf("deadline %v, %v", deadline, ctx.Err())
		f.mu.Unlock()
		return nil, ctx.Err()
	case "blocked":
		f.mu.Lock()
		defer f.mu.Unlock()
		return &bucket.Object{Body: io.NopCloser(strings.NewReader(f.blocked)), Version: "1"}, nil
	}
	return f.Memory.Get(ctx, key, opts)
}

func (f *fake) Close() error {
	fmt.Fprintln(os.Stderr, "fake bucket closed")
	return f.Memory.Close()
}

type blockingBody struct {
	ctx  context.Context
	sent bool
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, bytes.Repeat([]byte("x"), chunkSize)), nil
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func (b *blockingBody) Close() error { return nil }
