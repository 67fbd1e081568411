// Package bucket is the contract between the kernel and an object store
// (bucket/v1): the cluster's only shared state. Every ownership decision and
// every replicated write is a conditional create or replace, so a provider
// must honour conditions exactly (book ADR 0007, 0020). bucket-fs and bucket-s3
// implement it; conformance/buckettest holds its rules, and Probe is the
// check a node runs before it trusts a bucket.
//
// Keys. A key is 1 to 960 bytes of A-Z a-z 0-9 - . _ ~ % and /; / separates
// segments, each 1 to 255 bytes and neither "." nor "..", so a key never
// starts or ends with / nor holds //. That is every character the kernel
// writes (actor names are percent-encoded into the unreserved set), it is
// the same string on every store, and a file-system provider can map each
// segment to a file name. The kernel never makes a key both an object and
// the parent of others (k and k/x): a file-system provider may refuse that.
// 960 leaves a provider MaxPrefixLen of the 1,024 bytes S3 allows for a
// prefix of its own (ADR 1011). CheckKey and CheckPrefix apply the rule;
// providers call them first.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// API is the contract version a bucket plugin declares.
const API = "bucket/v1"

// Bucket is what a bucket plugin's New returns. It is safe for concurrent use.
type Bucket interface {
	// Get reads an object, whole or a byte range of it, with its version:
	// the body and the version of one write, also while another replaces
	// it (a later write's version with an earlier body would let the
	// reader replace, at that version, what it never read). A missing key
	// is ErrNotFound; a range that does not start inside the object is
	// ErrRange.
	Get(ctx context.Context, key string, opts GetOptions) (*Object, error)
	// Put writes size bytes of body under a condition and returns the new
	// version; body is read once, as a stream. A condition that does not
	// hold is ErrPrecondition, and the object is then unchanged (IfVersion
	// on a missing key included). A body shorter or longer than size is an
	// error and writes nothing (SizedBody checks it).
	Put(ctx context.Context, key string, body io.Reader, size int64, cond Condition) (Version, error)
	// Delete removes an object, unconditionally or (cond.IfVersion) only at
	// that version. A missing key is ErrNotFound; a version that no longer
	// matches is ErrPrecondition. IfAbsent is refused. A conditional delete
	// is a capability, not a requirement: MinIO and gofakes3 delete whatever
	// the version, and a store may refuse the condition. The kernel does
	// not rely on it, and its protocols must not: an object changes hands
	// by a conditional Put, and a delete is unconditional, of an object no
	// other node writes (the start-time probe's own).
	Delete(ctx context.Context, key string, cond Condition) error
	// List returns the objects whose keys start with prefix, after
	// StartAfter, at most Limit of them (the provider's page size if 0; a
	// negative Limit is an error); followed from page to page (Next), it
	// returns each such key exactly once. Keys come in ascending byte order,
	// except that a store walking directories may put keys that first
	// differ at a "/" the other way (d/x before d-/x). Next carries the
	// position in the store's own order: a provider may make it a token of
	// its own rather than the last key (bucket-s3 does: MinIO's StartAfter
	// skips keys near a "/"). The kernel does not rely on order across a
	// "/", and its protocols must not: one that needs an order keeps its
	// keys apart inside one segment of fixed shape, or sorts what it read.
	List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error)
	Close() error
}

// Version is an object's version token (an ETag on S3), never empty. The
// tokens Put, Get and List give for an object are each accepted by
// IfVersion until the object changes, and refused after; they need not be
// equal (R2 returns another token from a write than from a read), so the
// kernel hands them back to the bucket and never compares them. Every write
// of new content gets a new token; two writes of the same bytes may share
// one (an ETag hashes the content), so the kernel makes each write it
// conditions on unique.
type Version string

// Condition is the precondition of a write or delete. The zero value is
// unconditional; Put with IfAbsent creates only if the key is absent; with
// IfVersion it replaces only the object at that version. Setting both is an
// error.
type Condition struct {
	IfAbsent  bool
	IfVersion Version
}

// GetOptions select a byte range: Offset 0 and Length 0 read the whole
// object; Length 0 reads to the end; a Length past the end stops at the end.
// A range must start inside the object (Offset < Size): any other, or a
// negative Offset or Length, is ErrRange. That is S3's rule (416), so an
// S3 provider maps it rather than emulating another.
type GetOptions struct {
	Offset, Length int64
}

// Object is an object being read; Body must be closed.
type Object struct {
	Body    io.ReadCloser
	Size    int64 // the whole object's size
	Version Version
	ModTime time.Time
}

// ListOptions page through a listing. StartAfter is "", a key, or a
// previous page's Next.
type ListOptions struct {
	StartAfter string
	Limit      int
}

// ListPage is one page of a listing; Next is "" on the last page, else the
// StartAfter of the next. Callers pass Next back unread: it is the last key
// listed, or a provider's own token, which starts with CursorMark.
type ListPage struct {
	Entries []Entry
	Next    string
}

// CursorMark starts a ListPage.Next that is a provider's token rather than
// a key; no key holds it.
const CursorMark = "!"

// Entry is one listed object.
type Entry struct {
	Key     string
	Size    int64
	Version Version
	ModTime time.Time
}

var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("bucket: object not found")
	// ErrPrecondition: a condition did not hold (the object exists, or its
	// version changed).
	ErrPrecondition = errors.New("bucket: precondition failed")
	// ErrTransient: a fault a retry may get past (a timeout, throttling, a
	// 5xx). Providers wrap such errors so that errors.Is matches it.
	ErrTransient = errors.New("bucket: transient failure")
	// ErrRange: a Get's range does not start inside the object.
	ErrRange = errors.New("bucket: range not satisfiable")
	// ErrInvalidKey: a key or prefix breaks the key rule (package doc).
	ErrInvalidKey = errors.New("bucket: invalid key")
)

// MaxKeyLen and MaxSegmentLen bound a key and each of its segments, in
// bytes. MaxPrefixLen is the room left for a provider's own prefix (its /
// included) within the 1,024 bytes S3 and most stores allow a key.
const (
	MaxKeyLen     = 960
	MaxSegmentLen = 255
	MaxPrefixLen  = 1024 - MaxKeyLen
)

// CheckKey returns an error wrapping ErrInvalidKey, naming the key and what
// is wrong with it, if key breaks the key rule.
func CheckKey(key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, err)
	}
	return nil
}

// CheckPrefix checks a List prefix: "" or the start of some valid key.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// A prefix is valid if some key starts with it: itself, or itself and
	// one more letter (which completes a trailing "/", "." or "..").
	if checkKey(prefix) == nil {
		return nil
	}
	if err := checkKey(prefix + "x"); err != nil {
		return fmt.Errorf("%w: prefix %q: %s", ErrInvalidKey, prefix, err)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return errors.New("empty")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%d bytes long (at most %d)", len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("byte %q at %d is not one of A-Z a-z 0-9 - . _ ~ %% /", key[i:i+1], i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return errors.New("has an empty segment (a leading, trailing or double /)")
		case seg == "." || seg == "..":
			return fmt.Errorf("has a %q segment", seg)
		case len(seg) > MaxSegmentLen:
			return fmt.Errorf("has a segment of %d bytes (at most %d)", len(seg), MaxSegmentLen)
		}
	}
	return nil
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '%' || c == '/'
}

// Check refuses a Condition setting both IfAbsent and IfVersion.
func (c Condition) Check() error {
	if c.IfAbsent && c.IfVersion != "" {
		return errors.New("bucket: a condition cannot be both IfAbsent and IfVersion")
	}
	return nil
}

// SizedBody reads body as Put must: exactly size bytes. If body ends early
// or holds more, the read fails before the last byte is handed on, so an
// upload streaming from it (with Content-Length size) aborts instead of
// storing a wrong object.
func SizedBody(body io.Reader, size int64) io.Reader {
	return &sizedBody{r: body, size: size}
}

type sizedBody struct {
	r         io.Reader
	size, got int64
	err       error // sticky: io.EOF once done
}

func (s *sizedBody) Read(p []byte) (int, error) {
	switch {
	case s.err != nil:
		return 0, s.err
	case s.size < 0:
		s.err = fmt.Errorf("bucket: negative body size %d", s.size)
		return 0, s.err
	case len(p) == 0:
		return 0, nil
	}
	left := s.size - s.got
	if left > 1 { // all but the last byte pass straight through
		n, err := s.r.Read(p[:min(int64(len(p)), left-1)])
		s.got += int64(n)
		if err == io.EOF {
			err = s.short()
		}
		s.err = err
		return n, err
	}
	// The last byte and what follows it, which must be nothing.
	var tail [2]byte
	n, err := io.ReadFull(s.r, tail[:left+1])
	switch {
	case int64(n) > left:
		s.err = fmt.Errorf("bucket: body longer than its declared %d bytes", s.size)
	case int64(n) < left:
		s.err = s.short()
	case err != io.EOF && err != io.ErrUnexpectedEOF:
		s.err = err
	default:
		s.err = io.EOF
		return copy(p, tail[:n]), io.EOF
	}
	return 0, s.err
}

func (s *sizedBody) short() error {
	return fmt.Errorf("bucket: body ended after %d of its declared %d bytes: %w", s.got, s.size, io.ErrUnexpectedEOF)
}

// Lister is the listing part of a Bucket, for ListAll: a caller may wrap
// List with rules of its own (a restore's resends) and page it the same way.
type Lister interface {
	List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error)
}

// ListAll follows a listing of prefix from page to page and returns every
// entry once, in the order the pages first gave them (sort them if order
// matters: see List on order across a "/"). A key a later page sends again
// is dropped, and a page whose Next is a cursor already followed is an
// error: a store that breaks List's rules ends the listing rather than
// repeating it for ever.
func ListAll(ctx context.Context, b Lister, prefix string) ([]Entry, error) {
	var all []Entry
	seen := map[string]bool{}
	followed := map[string]bool{"": true}
	opts := ListOptions{}
	for {
		page, err := b.List(ctx, prefix, opts)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Entries {
			if !seen[e.Key] {
				seen[e.Key] = true
				all = append(all, e)
			}
		}
		if page.Next == "" {
			return all, nil
		}
		if followed[page.Next] {
			return nil, fmt.Errorf("bucket: listing %q: the store's cursor did not advance (%q came again after %d keys)", prefix, page.Next, len(all))
		}
		followed[page.Next] = true
		opts.StartAfter = page.Next
	}
}
