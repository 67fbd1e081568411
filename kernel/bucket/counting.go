package bucket

import (
	"context"
	"errors"
	"io"
)

// Counting wraps b so that every request is counted by operation (get,
// put, delete, list: each page of a listing) and Status: what
// wasmkeep_bucket_requests_total counts.
func Counting(b Bucket, count func(op, status string)) Bucket {
	return &counting{b, count}
}

type counting struct {
	inner Bucket
	count func(op, status string)
}

// Status is the status label of a bucket call's error, the book's four:
// ok; not_found and precondition, routine (an object not created yet, a
// condition lost to another writer); error for anything else (an
// unreachable bucket, refused credentials, throttling, a server error, a
// request given up).
func Status(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrPrecondition):
		return "precondition"
	}
	return "error"
}

func (c *counting) Get(ctx context.Context, key string, opts GetOptions) (*Object, error) {
	o, err := c.inner.Get(ctx, key, opts)
	c.count("get", Status(err))
	return o, err
}

func (c *counting) Put(ctx context.Context, key string, body io.Reader, size int64, cond Condition) (Version, error) {
	v, err := c.inner.Put(ctx, key, body, size, cond)
	c.count("put", Status(err))
	return v, err
}

func (c *counting) Delete(ctx context.Context, key string, cond Condition) error {
	err := c.inner.Delete(ctx, key, cond)
	c.count("delete", Status(err))
	return err
}

func (c *counting) List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error) {
	p, err := c.inner.List(ctx, prefix, opts)
	c.count("list", Status(err))
	return p, err
}

func (c *counting) Close() error { return c.inner.Close() }
