package replication

import (
	"context"
	"errors"
	"io"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Counting wraps b so that every request is counted by operation (get,
// put, delete, list) and status (ok, not_found, precondition, range,
// transient, canceled, error): wasmkeep_bucket_requests_total.
func Counting(b bucket.Bucket, count func(op, status string)) bucket.Bucket {
	return &counting{b, count}
}

type counting struct {
	inner bucket.Bucket
	count func(op, status string)
}

// Status is the status label of a bucket call's error.
func Status(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, bucket.ErrNotFound):
		return "not_found"
	case errors.Is(err, bucket.ErrPrecondition):
		return "precondition"
	case errors.Is(err, bucket.ErrRange):
		return "range"
	case errors.Is(err, bucket.ErrTransient):
		return "transient"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

func (c *counting) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	o, err := c.inner.Get(ctx, key, opts)
	c.count("get", Status(err))
	return o, err
}

func (c *counting) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	v, err := c.inner.Put(ctx, key, body, size, cond)
	c.count("put", Status(err))
	return v, err
}

func (c *counting) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	err := c.inner.Delete(ctx, key, cond)
	c.count("delete", Status(err))
	return err
}

func (c *counting) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	p, err := c.inner.List(ctx, prefix, opts)
	c.count("list", Status(err))
	return p, err
}

func (c *counting) Close() error { return c.inner.Close() }
