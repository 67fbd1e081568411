package buckettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Memory is a bucket in memory that follows the contract, the suite's
// reference: buckettest's own tests run the rules on it, honest and with
// Flaws, to show that the rules pass and that they can fail. It is not a
// plugin: nothing survives the process.
type Memory struct {
	flaws Flaws
	mu    sync.Mutex
	objs  map[string]memObject
	seq   uint64
	gets  uint64 // Gets of torn objects (TornGets)
}

// Flaws make a Memory bucket break the contract on purpose.
type Flaws struct {
	IgnoreConditions bool // Put and Delete write whatever the condition
	RefusedPutsLand  bool // a Put refused with ErrPrecondition writes all the same
	ReverseList      bool // each List page comes in descending key order
	Unreachable      bool // every call fails with ErrTransient
	// Flaws the contract allows, capabilities the kernel does without:
	IgnoreDeleteIfVersion bool // Delete deletes whatever its IfVersion (MinIO, gofakes3)
	RefuseDeleteIfVersion bool // a Delete with IfVersion is refused as unsupported
	ListByDirectory       bool // List walks directories, each in name order: d/x before d-/x
	// Flaws the contract does not allow:
	IgnoreIfAbsent bool // a Put with IfAbsent overwrites an existing object (s3rver)
	// Every other Get of an object replaced tornAfter times or more reads
	// the body before the last replace with the version after it
	// (VersityGW's posix --sidecar during a replace).
	TornGets bool
	// With ListByDirectory, StartAfter is counted in byte order, so a page
	// going on from the last key skips keys (MinIO's StartAfter, which
	// bucket-s3 avoids by paging with continuation tokens).
	StartAfterInByteOrder bool
}

type memObject struct {
	data     []byte
	version  bucket.Version
	mod      time.Time
	prev     []byte // the body before the last replace (TornGets)
	replaces int
}

// tornAfter is how many replaces an object takes before TornGets tears
// its Gets: more than any rule but GetDuringReplace makes.
const tornAfter = 50

var _ bucket.Bucket = (*Memory)(nil)

// NewMemory returns an empty bucket with the given flaws (none: Flaws{}).
func NewMemory(f Flaws) *Memory { return &Memory{flaws: f, objs: map[string]memObject{}} }

// enter checks what every call checks first.
func (m *Memory) enter(ctx context.Context, key string, check func(string) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.flaws.Unreachable {
		return fmt.Errorf("memory bucket unreachable: %w", bucket.ErrTransient)
	}
	return check(key)
}

func (m *Memory) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	if err := m.enter(ctx, key, bucket.CheckKey); err != nil {
		return nil, err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	if m.flaws.TornGets && o.replaces >= tornAfter {
		if m.gets++; m.gets%2 == 0 {
			o.data = o.prev
		}
	}
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, bucket.ErrNotFound)
	}
	size := int64(len(o.data))
	whole := opts.Offset == 0 && opts.Length == 0
	if opts.Offset < 0 || opts.Length < 0 || !whole && opts.Offset >= size {
		return nil, fmt.Errorf("%s: range %d+%d of %d bytes: %w", key, opts.Offset, opts.Length, size, bucket.ErrRange)
	}
	end := size
	if opts.Length > 0 {
		end = min(size, opts.Offset+opts.Length)
	}
	return &bucket.Object{
		Body:    io.NopCloser(bytes.NewReader(o.data[opts.Offset:end])),
		Size:    size,
		Version: o.version,
		ModTime: o.mod,
	}, nil
}

func (m *Memory) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	if err := m.enter(ctx, key, bucket.CheckKey); err != nil {
		return "", err
	}
	if err := cond.Check(); err != nil {
		return "", err
	}
	data, err := io.ReadAll(bucket.SizedBody(body, size))
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	err = m.holds(key, cond)
	if err != nil && !m.flaws.RefusedPutsLand {
		return "", err
	}
	m.seq++
	v := bucket.Version(fmt.Sprintf("v%d", m.seq))
	old, replaced := m.objs[key]
	next := memObject{data: data, version: v, mod: time.Now()}
	if replaced {
		next.prev, next.replaces = old.data, old.replaces+1
	}
	m.objs[key] = next
	if err != nil {
		return "", err
	}
	return v, nil
}

// holds checks a condition; a put at a version of a missing key fails it.
func (m *Memory) holds(key string, cond bucket.Condition) error {
	o, exists := m.objs[key]
	if m.flaws.IgnoreConditions ||
		!cond.IfAbsent && cond.IfVersion == "" ||
		cond.IfAbsent && (!exists || m.flaws.IgnoreIfAbsent) ||
		cond.IfVersion != "" && exists && o.version == cond.IfVersion {
		return nil
	}
	return fmt.Errorf("%s: %w", key, bucket.ErrPrecondition)
}

func (m *Memory) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := m.enter(ctx, key, bucket.CheckKey); err != nil {
		return err
	}
	if cond.IfAbsent {
		return errors.New("bucket: Delete takes no IfAbsent condition")
	}
	if m.flaws.RefuseDeleteIfVersion && cond.IfVersion != "" {
		return fmt.Errorf("memory bucket: delete %s: a condition on a delete is not implemented", key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; !ok {
		return fmt.Errorf("%s: %w", key, bucket.ErrNotFound)
	}
	if m.flaws.IgnoreDeleteIfVersion {
		cond = bucket.Condition{}
	}
	if err := m.holds(key, cond); err != nil {
		return err
	}
	delete(m.objs, key)
	return nil
}

func (m *Memory) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	if err := m.enter(ctx, prefix, bucket.CheckPrefix); err != nil {
		return bucket.ListPage{}, err
	}
	if opts.Limit < 0 {
		return bucket.ListPage{}, fmt.Errorf("bucket: List limit %d is negative", opts.Limit)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 1000
	}
	order, after := strings.Compare, strings.Compare
	if m.flaws.ListByDirectory {
		order = directoryOrder
		if !m.flaws.StartAfterInByteOrder {
			after = directoryOrder
		}
	}
	m.mu.Lock()
	var keys []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) && after(k, opts.StartAfter) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, order)
	var page bucket.ListPage
	if len(keys) > limit {
		keys = keys[:limit]
		page.Next = keys[limit-1]
	}
	for _, k := range keys {
		o := m.objs[k]
		page.Entries = append(page.Entries, bucket.Entry{Key: k, Size: int64(len(o.data)), Version: o.version, ModTime: o.mod})
	}
	m.mu.Unlock()
	if m.flaws.ReverseList {
		slices.Reverse(page.Entries)
	}
	return page, nil
}

func (m *Memory) Close() error { return nil }

// directoryOrder compares keys as a walk of directories meets them: segment
// by segment, each in byte order, so all of d/ comes before d-/ although
// '-' sorts before '/'.
func directoryOrder(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}
