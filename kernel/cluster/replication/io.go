package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

var (
	errSilent = errors.New("the bucket stayed silent")
	errSlow   = errors.New("the read took too long")
)

// create uploads data at key with a conditional create (never an
// overwrite) in at most attempts attempts, the first given up after first,
// the next ones after twice that, all of them within total. A resend
// carries the same bytes. It returns nil once the bucket created the
// object, ErrExists when the key held another object before any attempt of
// this call could have landed, and an error wrapping ErrUnknown when the
// outcome is not known.
func create(ctx context.Context, b bucket.Bucket, clk clock.Clock, key string, data []byte, attempts int, first, total time.Duration) error {
	ctx, cancel := clock.WithTimeout(ctx, clk, total)
	defer cancel()
	mayHaveLanded := false
	var last error
	for i := 0; i < attempts && ctx.Err() == nil; i++ {
		per := first
		if i > 0 {
			per = 2 * first
		}
		actx, acancel := clock.WithTimeout(ctx, clk, per)
		_, err := b.Put(actx, key, bytes.NewReader(data), int64(len(data)), bucket.Condition{IfAbsent: true})
		acancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, bucket.ErrPrecondition) && !mayHaveLanded:
			return fmt.Errorf("%w: %s", ErrExists, key)
		case errors.Is(err, bucket.ErrPrecondition):
			// An earlier attempt of this call may have landed: the object
			// is ours if it holds these bytes.
			if same, rerr := holds(ctx, b, clk, key, data); rerr == nil && same {
				return nil
			}
			return fmt.Errorf("%w: %s exists after an attempt that may have landed", ErrUnknown, key)
		}
		last = err
		mayHaveLanded = true
		if !errors.Is(err, bucket.ErrTransient) && actx.Err() == nil {
			break // an answer no resend changes
		}
	}
	if last == nil {
		last = ctx.Err()
	}
	return fmt.Errorf("%w: %s: %v", ErrUnknown, key, last)
}

// holds reports whether key holds data, in one read under the read rule.
func holds(ctx context.Context, b bucket.Bucket, clk clock.Clock, key string, data []byte) (bool, error) {
	got, err := readOnce(ctx, b, clk, key, -1, bucket.GetOptions{}, ReadSilence+mb(int64(len(data)))*time.Second)
	if err != nil {
		return false, err
	}
	return bytes.Equal(got, data), nil
}

// attemptTimeout is an upload's first attempt's bound for n bytes.
func attemptTimeout(n int) time.Duration {
	return UploadAttempt + mb(int64(n))*time.Second
}

// uploadTotal is the whole upload's bound for n bytes.
func uploadTotal(n int) time.Duration {
	return UploadTotal + mb(int64(n))*time.Second
}

// retryable reports whether a read's error is one a resend may get past:
// silence, slowness, a transient error; and whether to pause first.
func retryable(err error) (again, pause bool) {
	switch {
	case errors.Is(err, errSilent), errors.Is(err, errSlow):
		return true, false
	case errors.Is(err, bucket.ErrTransient):
		return true, true
	}
	return false, false
}

// read reads key (size bytes by the listing; -1: any) under restore steps
// 5 to 7: each try waits for its turn in the node's limiter, is given up
// after ReadSilence of silence or ReadSilence plus a second per started
// megabyte read alongside it, and is sent again up to ReadTries tries,
// after a pause (without its turn) when the bucket refused it with an
// error a resend may get past. Any other error ends it at once. extra,
// if not nil, gains at each try the time other reads in flight on the node
// added to that try's limit (what a restore's deadline does not count).
func read(ctx context.Context, b bucket.Bucket, clk clock.Clock, l *Limiter, key string, size int64, opts bucket.GetOptions, extra *atomic.Int64) ([]byte, error) {
	var err error
	for try := 0; try < ReadTries; try++ {
		release, aerr := l.acquire(ctx, max(size, 0))
		if aerr != nil {
			return nil, aerr
		}
		_, inFlight := l.InFlight()
		limit, own := ReadSilence+mb(inFlight)*time.Second, ReadSilence+mb(l.share(max(size, 0)))*time.Second
		if extra != nil && limit > own {
			extra.Add(int64(limit - own))
		}
		var data []byte
		data, err = readOnce(ctx, b, clk, key, size, opts, limit)
		release()
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		again, pause := retryable(err)
		if !again {
			return nil, err
		}
		if pause && try < len(ReadPauses) {
			if serr := clock.Sleep(ctx, clk, ReadPauses[try]); serr != nil {
				return nil, serr
			}
		}
	}
	return nil, fmt.Errorf("replication: %s given up after %d tries: %w", key, ReadTries, err)
}

// readOnce is one try: the object whole into memory, cut when the bucket
// stays silent for ReadSilence or after limit. size >= 0 is the size the
// listing gave: an object of another size is refused.
func readOnce(ctx context.Context, b bucket.Bucket, clk clock.Clock, key string, size int64, opts bucket.GetOptions, limit time.Duration) ([]byte, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	silence := clk.AfterFunc(ReadSilence, func() { cancel(errSilent) })
	defer silence.Stop()
	slow := clk.AfterFunc(limit, func() { cancel(errSlow) })
	defer slow.Stop()
	cut := func(err error) error {
		if c := context.Cause(rctx); c != nil && ctx.Err() == nil && (errors.Is(c, errSilent) || errors.Is(c, errSlow)) {
			return fmt.Errorf("replication: read %s: %w", key, c)
		}
		return err
	}
	o, err := b.Get(rctx, key, opts)
	if err != nil {
		return nil, cut(err)
	}
	defer o.Body.Close()
	if size >= 0 && o.Size != size {
		return nil, fmt.Errorf("replication: %s holds %d bytes, its listing says %d", key, o.Size, size)
	}
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		silence.Reset(ReadSilence)
		n, rerr := o.Body.Read(chunk)
		buf.Write(chunk[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, cut(rerr)
		}
		if rctx.Err() != nil {
			return nil, cut(rctx.Err())
		}
	}
	if rctx.Err() != nil {
		return nil, cut(rctx.Err())
	}
	return buf.Bytes(), nil
}

// list lists prefix whole (bucket.ListAll), each page under the silence
// rule and sent again up to ReadTries tries.
func list(ctx context.Context, b bucket.Bucket, clk clock.Clock, prefix string) ([]bucket.Entry, error) {
	entries, err := bucket.ListAll(ctx, resending{b, clk}, prefix)
	if err != nil {
		return nil, fmt.Errorf("replication: list %s: %w", prefix, err)
	}
	return entries, nil
}

// resending is a bucket's List under a restore's read rules: a page the
// bucket leaves silent for ReadSilence, or refuses with an error a resend
// may get past, is asked again, up to ReadTries tries.
type resending struct {
	b   bucket.Bucket
	clk clock.Clock
}

func (r resending) List(ctx context.Context, prefix string, opts bucket.ListOptions) (page bucket.ListPage, err error) {
	for try := 0; try < ReadTries; try++ {
		lctx, cancel := clock.WithTimeout(ctx, r.clk, ReadSilence)
		page, err = r.b.List(lctx, prefix, opts)
		silent := lctx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if silent {
			continue
		}
		again, pause := retryable(err)
		if !again {
			break
		}
		if pause && try < len(ReadPauses) {
			if serr := clock.Sleep(ctx, r.clk, ReadPauses[try]); serr != nil {
				return page, serr
			}
		}
	}
	return page, err
}
