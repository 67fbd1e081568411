package s3bucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"gocloud.dev/blob"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

var _ bucket.Bucket = (*Bucket)(nil)

// Bucket is a bucket/v1 bucket on S3.
type Bucket struct {
	blob   *blob.Bucket
	name   string
	prefix string // "" or ending in "/"
}

// writeTokenMeta is the user metadata (x-amz-meta-wasmkeep-write) that
// tags each Put with a random token, so that a Put whose earlier try may
// have landed can tell its own object from another writer's (ADR 1012).
const writeTokenMeta = "wasmkeep-write"

// maxListPage is S3's largest listing page.
const maxListPage = 1000

func (b *Bucket) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	stored, err := b.checkKey(key)
	if err != nil {
		return nil, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, fmt.Errorf("%w: get %q: offset %d, length %d", bucket.ErrRange, key, opts.Offset, opts.Length)
	}
	length := opts.Length
	if length == 0 {
		length = -1 // to the end
	}
	r, err := b.blob.NewRangeReader(ctx, stored, opts.Offset, length, nil)
	if err != nil {
		return nil, b.fail(ctx, "get", key, err)
	}
	// The version comes from the same response as the body.
	var out s3.GetObjectOutput
	if !r.As(&out) || aws.ToString(out.ETag) == "" {
		r.Close()
		return nil, fmt.Errorf("s3 bucket %s: get %q: the store sent no ETag", b.name, key)
	}
	return &bucket.Object{
		Body:    &body{r: r, b: b, key: key},
		Size:    r.Size(),
		Version: version(*out.ETag),
		ModTime: r.ModTime(),
	}, nil
}

// body maps a read's transient faults (a stalled GET) to ErrTransient.
type body struct {
	r   *blob.Reader
	b   *Bucket
	key string
}

func (o *body) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if err != nil && err != io.EOF {
		err = o.b.fail(context.Background(), "read", o.key, err)
	}
	return n, err
}

func (o *body) Close() error { return o.r.Close() }

func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	stored, err := b.checkKey(key)
	if err != nil {
		return "", err
	}
	if err := cond.Check(); err != nil {
		return "", err
	}
	if size < 0 {
		return "", fmt.Errorf("s3 bucket %s: put %q: size %d is negative", b.name, key, size)
	}
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	c := new(call)
	err = b.blob.Upload(withCall(ctx, c), stored, bucket.SizedBody(r, size), &blob.WriterOptions{
		ContentType: "application/octet-stream",
		Metadata:    map[string]string{writeTokenMeta: token},
		BeforeWrite: func(as func(any) bool) error {
			var in *transfermanager.UploadObjectInput
			if !as(&in) {
				// Never fall back to an unconditional write.
				return errors.New("s3blob did not expose the upload's input: cannot set its condition")
			}
			// Sets the part size for a body too big for one part; the
			// condition goes on the PUT or on the multipart completion.
			in.ContentLength = aws.Int64(size)
			switch {
			case cond.IfAbsent:
				in.IfNoneMatch = aws.String("*")
			case cond.IfVersion != "":
				in.IfMatch = aws.String(string(cond.IfVersion))
			}
			return nil
		},
	})
	if err == nil {
		if c.ETag() == "" {
			return "", fmt.Errorf("s3 bucket %s: put %q: the store sent no ETag", b.name, key)
		}
		return version(c.ETag()), nil
	}
	if c.tries.Load() > 1 && (cond != bucket.Condition{}) {
		// An earlier try may have landed and made this one's condition
		// fail (or its multipart upload vanish): the object tells.
		switch v, mine, herr := b.writtenBy(ctx, key, token); {
		case herr != nil:
			return "", fmt.Errorf("%w: s3 bucket %s: put %q: outcome unknown: it was sent %d times, then %v, and reading the object back failed: %v",
				bucket.ErrTransient, b.name, key, c.tries.Load(), err, herr)
		case mine:
			return v, nil
		}
	}
	sentinel := classify(ctx, err)
	if sentinel == bucket.ErrNotFound {
		// If-Match on a missing key: S3 answers 404, the contract says the
		// condition does not hold.
		sentinel = bucket.ErrPrecondition
	}
	return "", b.wrap("put", key, sentinel, err)
}

// writtenBy reports whether the object at key carries token, with its
// version from the same response.
func (b *Bucket) writtenBy(ctx context.Context, key, token string) (bucket.Version, bool, error) {
	a, err := b.blob.Attributes(ctx, b.storeKey(key))
	if err != nil {
		if errors.Is(b.fail(ctx, "head", key, err), bucket.ErrNotFound) {
			return "", false, nil
		}
		return "", false, err
	}
	return version(a.ETag), a.Metadata[writeTokenMeta] == token && a.ETag != "", nil
}

func (b *Bucket) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	stored, err := b.checkKey(key)
	if err != nil {
		return err
	}
	if cond.IfAbsent {
		return fmt.Errorf("s3 bucket %s: delete %q: IfAbsent is not a condition a delete can have", b.name, key)
	}
	c := new(call)
	err = b.blob.DeleteWithOptions(withCall(ctx, c), stored, &blob.DeleteOptions{
		BeforeDelete: func(as func(any) bool) error {
			if cond.IfVersion == "" {
				return nil
			}
			var in *s3.DeleteObjectInput
			if !as(&in) {
				return errors.New("s3blob did not expose the delete's input: cannot set its condition")
			}
			in.IfMatch = aws.String(string(cond.IfVersion))
			return nil
		},
	})
	if err == nil {
		return nil
	}
	err = b.fail(ctx, "delete", key, err)
	if c.tries.Load() > 1 && cond.IfVersion != "" && (errors.Is(err, bucket.ErrNotFound) || errors.Is(err, bucket.ErrPrecondition)) {
		// An earlier try may have deleted it: if the key is gone, so is
		// the version the caller meant (ADR 1012).
		if _, herr := b.blob.Attributes(ctx, stored); errors.Is(b.fail(ctx, "head", key, herr), bucket.ErrNotFound) {
			return nil
		}
	}
	return err
}

func (b *Bucket) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	var page bucket.ListPage
	if err := bucket.CheckPrefix(prefix); err != nil {
		return page, err
	}
	if opts.Limit < 0 {
		return page, fmt.Errorf("s3 bucket %s: list %q: limit %d is negative", b.name, prefix, opts.Limit)
	}
	if storedLen(b.storeKey(prefix)) > maxStoredKey {
		return page, nil // no key the store holds is under it
	}
	limit := opts.Limit
	if limit == 0 || limit > maxListPage {
		limit = maxListPage
	}
	// A page goes on from the store's continuation token, not from its
	// last key: MinIO lists in its own order, and a StartAfter there skips
	// the keys it lists after a greater one (d/e/k after d/eG4).
	token, startAfter := blob.FirstPageToken, opts.StartAfter
	if t, ok := strings.CutPrefix(opts.StartAfter, bucket.CursorMark); ok {
		token, startAfter = []byte(t), ""
	}
	objs, next, err := b.blob.ListPage(ctx, token, limit, &blob.ListOptions{
		Prefix: b.storeKey(prefix),
		BeforeList: func(as func(any) bool) error {
			var in *s3.ListObjectsV2Input
			if !as(&in) {
				return errors.New("s3blob did not expose the listing's input: cannot set StartAfter")
			}
			if startAfter != "" {
				in.StartAfter = aws.String(b.storeKey(startAfter))
			}
			return nil
		},
	})
	if err != nil {
		return page, b.fail(ctx, "list", prefix, err)
	}
	for _, o := range objs {
		var obj types.Object
		if !o.As(&obj) || aws.ToString(obj.ETag) == "" {
			return page, fmt.Errorf("s3 bucket %s: list %q: the store sent no ETag for %q", b.name, prefix, o.Key)
		}
		page.Entries = append(page.Entries, bucket.Entry{
			Key:     keyOf(o.Key)[len(b.prefix):],
			Size:    o.Size,
			Version: version(*obj.ETag),
			ModTime: o.ModTime,
		})
	}
	if next != nil {
		page.Next = bucket.CursorMark + string(next)
	}
	return page, nil
}

func (b *Bucket) Close() error { return b.blob.Close() }

// s3blob rewrites a key holding "__0x<hex>__" (its escape syntax) on the
// store, which would list out of byte order. Every "__0x" is stored as
// "__0x~" instead: no escape sequence remains, and since the "~" follows
// the whole "__0x", keys keep their byte order and prefixes their keys.
const (
	escapeLike = "__0x"
	storedLike = "__0x~"
)

// storeKey is the store's name for a key (or a prefix, or StartAfter).
func (b *Bucket) storeKey(key string) string {
	return strings.ReplaceAll(b.prefix+key, escapeLike, storedLike)
}

// maxStoredKey is S3's limit on a key, in bytes, as the store sees it: the
// bucket's prefix and the escapes count.
const maxStoredKey = 1024

// storedLen is the length of a store key as s3blob sends it: it escapes the
// "/" of each "../" (a valid key may hold "a../b") as "__0x2f__".
func storedLen(stored string) int {
	return len(stored) + (len("__0x2f__")-1)*strings.Count(stored, "../")
}

// checkKey applies the contract's key rule, then S3's limit, which a key
// within the rule can pass once the prefix is added, and returns the
// store's name for key.
func (b *Bucket) checkKey(key string) (string, error) {
	if err := bucket.CheckKey(key); err != nil {
		return "", err
	}
	stored := b.storeKey(key)
	if n := storedLen(stored); n > maxStoredKey {
		return "", fmt.Errorf("%w %q: %d bytes on s3 bucket %s under the prefix %q (S3 allows at most %d, the prefix and s3blob's escapes included)",
			bucket.ErrInvalidKey, key, n, b.name, b.prefix, maxStoredKey)
	}
	return stored, nil
}

// keyOf undoes storeKey but for the bucket's prefix.
func keyOf(stored string) string { return strings.ReplaceAll(stored, storedLike, escapeLike) }

// version is an ETag as a version token, always in its quoted form: some
// stores (VersityGW) quote it in one answer and not in another.
func version(etag string) bucket.Version {
	if strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, `W/"`) {
		return bucket.Version(etag)
	}
	return bucket.Version(`"` + etag + `"`)
}

// fail wraps an error of op on key with the contract's sentinel for it.
func (b *Bucket) fail(ctx context.Context, op, key string, err error) error {
	return b.wrap(op, key, classify(ctx, err), err)
}

func (b *Bucket) wrap(op, key string, sentinel, err error) error {
	what := fmt.Sprintf("s3 bucket %s: %s %q", b.name, op, key)
	switch sentinel {
	case nil:
		return fmt.Errorf("%s: %w", what, err)
	case errNoBucket:
		return fmt.Errorf("%s: the bucket does not exist (or is not at this endpoint and region): %w", what, err)
	case errDenied:
		return fmt.Errorf("%s: access denied: check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and their rights on the bucket: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, what, err)
}

// Errors of the store's configuration rather than of an object.
var (
	errNoBucket = errors.New("no such bucket")
	errDenied   = errors.New("access denied")
)

// classify returns the contract's sentinel for an error (or errNoBucket,
// errDenied), nil for any other.
func classify(ctx context.Context, err error) error {
	var code string
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		return errNoBucket
	case code == "PreconditionFailed" || status == 412:
		return bucket.ErrPrecondition
	case code == "NoSuchUpload" || code == "ConditionalRequestConflict" || status == 408 || status == 429 || status >= 500:
		// A multipart upload the store no longer knows, a write racing
		// another, throttling, a fault of the store: worth a retry.
		return bucket.ErrTransient
	case code == "NoSuchKey" || code == "NotFound" || status == 404:
		return bucket.ErrNotFound
	case code == "InvalidRange" || status == 416:
		return bucket.ErrRange
	case status == 401 || status == 403:
		return errDenied
	case status != 0:
		return nil // any other answer is the store's definite refusal
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return nil // the caller gave up
	case isTransport(err):
		return bucket.ErrTransient
	}
	return nil
}

// isTransport reports a fault on the way to the store: a try that timed
// out, a request that could not be sent, a broken connection.
func isTransport(err error) bool {
	var te *timeoutError
	var se *smithyhttp.RequestSendError
	var ne net.Error
	return errors.As(err, &te) || errors.As(err, &se) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}
