package s3bucket

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithymw "github.com/aws/smithy-go/middleware"
)

// call is what one Put or Delete learns from the requests under it: how
// many times its deciding request (the PUT or multipart completion that
// carries the condition, or the DELETE) was sent, and the ETag the write's
// answer gave. s3blob returns neither, so perRequest records them.
type call struct {
	tries atomic.Int32
	mu    sync.Mutex
	etag  string
}

type callKey struct{}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// deciding are the operations whose answer decides a Put or a Delete.
var deciding = map[string]bool{"PutObject": true, "CompleteMultipartUpload": true, "DeleteObject": true}

// perRequest runs inside the SDK's retry loop, once per try: it ends a try
// that gets no answer within timeout (turning that into an error the retryer
// retries), counts the tries of deciding requests and keeps a write's ETag.
func perRequest(timeout time.Duration) func(*smithymw.Stack) error {
	return func(stack *smithymw.Stack) error {
		return stack.Finalize.Insert(smithymw.FinalizeMiddlewareFunc("wasmkeepPerRequest",
			func(ctx context.Context, in smithymw.FinalizeInput, next smithymw.FinalizeHandler) (smithymw.FinalizeOutput, smithymw.Metadata, error) {
				op := smithymw.GetOperationName(ctx)
				c, _ := ctx.Value(callKey{}).(*call)
				if c != nil && deciding[op] {
					c.tries.Add(1)
				}
				tryCtx, cancel := context.WithCancel(ctx)
				var expired atomic.Bool
				timer := time.AfterFunc(timeout, func() { expired.Store(true); cancel() })
				out, md, err := next.HandleFinalize(tryCtx, in)
				timer.Stop()
				if err != nil {
					cancel()
					if expired.Load() && ctx.Err() == nil {
						err = &timeoutError{op: op, after: timeout}
					}
					return out, md, err
				}
				switch r := out.Result.(type) {
				case *s3.GetObjectOutput:
					// The body streams after this returns: the try lives on
					// while it sends, and ends if it stalls.
					r.Body = &stallReader{body: r.Body, timer: timer, timeout: timeout, cancel: cancel, expired: &expired}
					return out, md, nil
				case *s3.PutObjectOutput:
					c.setETag(r.ETag)
				case *s3.CompleteMultipartUploadOutput:
					c.setETag(r.ETag)
				}
				cancel()
				return out, md, nil
			}), "Retry", smithymw.After)
	}
}

func (c *call) setETag(etag *string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.etag = aws.ToString(etag)
	c.mu.Unlock()
}

func (c *call) ETag() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etag
}

// timeoutError is a try that got no answer in time. It is retryable, and a
// transient fault once the tries run out.
type timeoutError struct {
	op    string
	after time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("%s: no answer within %s (request_timeout)", e.op, e.after)
}
func (e *timeoutError) RetryableError() bool { return true }
func (e *timeoutError) Timeout() bool        { return true }

// stallReader ends a GET whose body sends nothing for timeout.
type stallReader struct {
	body    io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
	cancel  context.CancelFunc
	expired *atomic.Bool
}

func (r *stallReader) Read(p []byte) (int, error) {
	r.timer.Reset(r.timeout)
	n, err := r.body.Read(p)
	r.timer.Stop()
	if err != nil && r.expired.Load() {
		err = &timeoutError{op: "GetObject body", after: r.timeout}
	}
	return n, err
}

func (r *stallReader) Close() error {
	r.timer.Stop()
	r.cancel()
	return r.body.Close()
}
