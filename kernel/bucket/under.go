package bucket

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Under is a view of b whose keys are relative to root: an app's state
// protocols run on one rooted at its state root (ADR 1045), so their code
// and their key tails are the same for every app and cannot reach another
// app's keys. root is a valid prefix ending in "/". The view shares b:
// closing it leaves b open. A key under the view may be at most
// MaxKeyLen-len(root) bytes long; the provider refuses a longer one by its
// full key.
func Under(b Bucket, root string) Bucket {
	if !strings.HasSuffix(root, "/") || CheckPrefix(root) != nil {
		panic(fmt.Sprintf("bucket.Under: root %q is not a valid prefix ending in /", root))
	}
	return &under{b, root}
}

type under struct {
	inner Bucket
	root  string
}

func (u *under) Get(ctx context.Context, key string, opts GetOptions) (*Object, error) {
	return u.inner.Get(ctx, u.root+key, opts)
}

func (u *under) Put(ctx context.Context, key string, body io.Reader, size int64, cond Condition) (Version, error) {
	return u.inner.Put(ctx, u.root+key, body, size, cond)
}

func (u *under) Delete(ctx context.Context, key string, cond Condition) error {
	return u.inner.Delete(ctx, u.root+key, cond)
}

// List lists under root+prefix. A StartAfter or Next that is a key is
// relative to root like every key; a provider's token passes unchanged.
func (u *under) List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error) {
	if opts.StartAfter != "" && !strings.HasPrefix(opts.StartAfter, CursorMark) {
		opts.StartAfter = u.root + opts.StartAfter
	}
	page, err := u.inner.List(ctx, u.root+prefix, opts)
	if err != nil {
		return ListPage{}, err
	}
	for i := range page.Entries {
		page.Entries[i].Key = strings.TrimPrefix(page.Entries[i].Key, u.root)
	}
	if !strings.HasPrefix(page.Next, CursorMark) {
		page.Next = strings.TrimPrefix(page.Next, u.root)
	}
	return page, nil
}

// Close leaves the shared bucket open: its owner closes it.
func (u *under) Close() error { return nil }
