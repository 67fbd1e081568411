// Package bucket is the contract between the kernel and an object store
// (bucket/v1): the cluster's only shared state. Every ownership decision and
// every replicated write is a conditional create or replace, so a provider
// must honour conditions exactly (ADR 0007, 0020). bucket-fs and bucket-s3
// implement it; conformance/buckettest holds its rules.
package bucket

import (
	"context"
	"errors"
	"io"
	"time"
)

// API is the contract version a bucket plugin declares.
const API = "bucket/v1"

// Bucket is what a bucket plugin's New returns. It is safe for concurrent use.
type Bucket interface {
	// Get reads an object, whole or a byte range of it, with its version.
	// A missing key is ErrNotFound.
	Get(ctx context.Context, key string, opts GetOptions) (*Object, error)
	// Put writes an object under a condition and returns its new version.
	// A condition that does not hold is ErrPrecondition.
	Put(ctx context.Context, key string, body io.Reader, size int64, cond Condition) (Version, error)
	// Delete removes an object, optionally only at a version. A missing key
	// is ErrNotFound; a version that no longer matches is ErrPrecondition.
	Delete(ctx context.Context, key string, cond Condition) error
	// List returns keys under prefix in ascending byte order, after
	// StartAfter, at most Limit of them (the provider's page size if 0).
	List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error)
	Close() error
}

// Version is an object's version token (an ETag on S3). Only equality means
// anything.
type Version string

// Condition is the precondition of a write or delete. The zero value is
// unconditional; Put with IfAbsent creates only if the key is absent; with
// IfVersion it replaces only the object at that version.
type Condition struct {
	IfAbsent  bool
	IfVersion Version
}

// GetOptions select a byte range: Length 0 reads to the end.
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

// ListOptions page through a listing.
type ListOptions struct {
	StartAfter string
	Limit      int
}

// ListPage is one page of a listing; Next is "" on the last page, else the
// StartAfter of the next.
type ListPage struct {
	Entries []Entry
	Next    string
}

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
)
