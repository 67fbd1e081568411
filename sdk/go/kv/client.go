package kv

import (
	"slices"
	"strconv"
	"time"

	"github.com/wasmkeep/wasmkeep/sdk/go/internal/actorcall"
)

// Client reaches the shards of one class. It holds no connection: each
// operation is one wasmkeep.Call to the key's shard (List calls every
// shard), which holds the caller's event while it runs. Use a Client from
// one actor's events (an actor runs one event at a time); keep it in a
// package variable, so that its read cache, if any, lasts as long as the
// instance.
type Client struct {
	class  string
	shards int
	maxAge int64 // the read cache's, in milliseconds; 0: no cache
	cache  map[string]cached

	call actorcall.Func // actorcall.Host; tests substitute a fake
	now  func() int64   // milliseconds since the Unix epoch
}

// cached is a read cache line: the entry (nil: absent) and when it was read.
type cached struct {
	entry *Entry
	at    int64
}

// maxCached bounds a read cache: past it the cache is emptied.
const maxCached = 4096

// New returns a client of the shards <class>/shard-0 .. <class>/shard-<shards-1>.
// Every caller of a class must use the same shard count: it is part of
// the data's layout. It panics if shards is less than 1.
func New(class string, shards int) *Client {
	if shards < 1 {
		panic("kv: New needs at least one shard")
	}
	return &Client{class: class, shards: shards, call: actorcall.Host, now: nowMs}
}

func nowMs() int64 { return time.Now().UnixMilli() }

// WithReadCache returns a client of the same shards whose Get serves a
// value from memory for up to maxAgeMs milliseconds after it was read; the
// new client's own writes update its cache, GetFresh skips it. The cache
// is lost with the caller's instance (hibernation, a failed event, a
// deploy). A maxAgeMs of 0 or less gives a client without a cache.
func (c *Client) WithReadCache(maxAgeMs int64) *Client {
	d := *c
	d.maxAge, d.cache = 0, nil
	if maxAgeMs > 0 {
		d.maxAge, d.cache = maxAgeMs, map[string]cached{}
	}
	return &d
}

// Shard is the address of the shard that holds key, "<class>/shard-<i>".
func (c *Client) Shard(key string) string { return c.shardAddress(ShardOf(key, c.shards)) }

func (c *Client) shardAddress(i int) string { return c.class + "/shard-" + strconv.Itoa(i) }

// Get returns key's entry, or nil if it has none (or it expired), from the
// read cache if the client has one and the line is young enough.
func (c *Client) Get(key string) (*Entry, error) {
	if c.cache != nil {
		if l, ok := c.cache[key]; ok {
			now := c.now()
			if now-l.at <= c.maxAge {
				if l.entry != nil && l.entry.ExpiresAt != 0 && l.entry.ExpiresAt <= now {
					return nil, nil
				}
				return l.entry, nil
			}
		}
	}
	return c.GetFresh(key)
}

// GetFresh returns key's entry from its shard, or nil if it has none,
// skipping the read cache (and refreshing it).
func (c *Client) GetFresh(key string) (*Entry, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	b, err := c.do(c.Shard(key), pathGet, encodeGet(key))
	if err != nil {
		return nil, err
	}
	e, derr := decodeEntry(b)
	if derr != nil {
		return nil, malformed(derr)
	}
	c.remember(key, e)
	return e, nil
}

// Put writes value under key and returns its new version, once durable.
func (c *Client) Put(key string, value []byte) (uint64, error) {
	return c.PutWith(key, value, PutOptions{})
}

// CompareAndSet writes value under key only if expect holds (Absent(),
// Version(v)); otherwise the error is ErrConflict. After an ErrCall, read
// the key again before retrying: the write may have applied.
func (c *Client) CompareAndSet(key string, expect Expect, value []byte) (uint64, error) {
	return c.PutWith(key, value, PutOptions{Expect: expect})
}

// PutWith writes value under key with options: a local write, an expiry, a
// condition. It returns the new version.
func (c *Client) PutWith(key string, value []byte, o PutOptions) (uint64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if o.TTLMs < 0 {
		return 0, &Error{Kind: Refused, Message: "a TTL cannot be negative"}
	}
	start := c.now()
	b, err := c.do(c.Shard(key), pathPut, encodePut(key, value, o))
	if err != nil {
		c.forget(key)
		return 0, err
	}
	v, derr := decodeVersion(b)
	if derr != nil {
		c.forget(key)
		return 0, malformed(derr)
	}
	if c.cache != nil {
		e := &Entry{Value: slices.Clone(value), Version: v}
		if o.TTLMs > 0 {
			e.ExpiresAt = start + o.TTLMs // the shard's is a little later: this one expires first
		}
		c.remember(key, e)
	}
	return v, nil
}

// Delete removes key, durably, and reports whether it had a value.
func (c *Client) Delete(key string) (bool, error) { return c.DeleteIf(key, Any()) }

// DeleteIf removes key only if expect holds, otherwise the error is
// ErrConflict; it reports whether the key had a value.
func (c *Client) DeleteIf(key string, expect Expect) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	b, err := c.do(c.Shard(key), pathDelete, encodeDelete(key, expect))
	if err != nil {
		c.forget(key)
		return false, err
	}
	deleted, derr := decodeBool(b)
	if derr != nil {
		c.forget(key)
		return false, malformed(derr)
	}
	c.remember(key, nil)
	return deleted, nil
}

// List returns up to limit keys that start with prefix, in byte order,
// from the first. limit 0 (or less) means DefaultListLimit, and more than
// MaxListLimit means MaxListLimit. Every shard is asked.
func (c *Client) List(prefix string, limit int) ([]string, error) {
	return c.list(prefix, nil, limit)
}

// ListAfter is List from the first key after after: the last key of the
// previous page gives the next one.
func (c *Client) ListAfter(prefix, after string, limit int) ([]string, error) {
	return c.list(prefix, &after, limit)
}

func (c *Client) list(prefix string, after *string, limit int) ([]string, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	if err := checkKey(prefix); err != nil {
		return nil, err
	}
	if after != nil {
		if err := checkKey(*after); err != nil {
			return nil, err
		}
	}
	body := encodeList(prefix, after, uint32(limit))
	pages := make([][]string, 0, c.shards)
	for i := 0; i < c.shards; i++ {
		b, err := c.do(c.shardAddress(i), pathList, body)
		if err != nil {
			return nil, err
		}
		keys, derr := decodeKeys(b)
		if derr != nil {
			return nil, malformed(derr)
		}
		pages = append(pages, keys)
	}
	return mergeKeys(pages, limit), nil
}

// mergeKeys merges pages of keys, each in byte order, into the first limit
// keys in byte order. A key lives in one shard, so there are no duplicates.
func mergeKeys(pages [][]string, limit int) []string {
	var all []string
	for _, p := range pages {
		all = append(all, p...)
	}
	slices.Sort(all) // Go compares strings byte by byte
	if len(all) > limit {
		all = all[:limit]
	}
	return all
}

func checkKey(key string) error {
	if len(key) > MaxKeyLen {
		return &Error{Kind: KeyTooLong, Message: "the key is " + strconv.Itoa(len(key)) + " bytes, over " + strconv.Itoa(MaxKeyLen)}
	}
	return nil
}

func malformed(err error) *Error {
	return &Error{Kind: Refused, Status: 200, Message: "malformed reply from the shard: " + err.Error()}
}

// do sends one operation to a shard and returns the reply's body, or the
// error its status means.
func (c *Client) do(address, path string, body []byte) ([]byte, error) {
	b, f := actorcall.Post(c.call, address, path, body)
	switch {
	case f == nil:
		return b, nil
	case f.Err != nil:
		return nil, &Error{Kind: Call, Message: address + ": " + f.Err.Error()}
	case f.Status == 409:
		return nil, &Error{Kind: Conflict, Message: f.Message}
	case f.Status == 500:
		return nil, &Error{Kind: Storage, Message: f.Message}
	}
	return nil, &Error{Kind: Refused, Status: f.Status, Message: f.Message}
}

func (c *Client) remember(key string, e *Entry) {
	if c.cache == nil {
		return
	}
	if len(c.cache) >= maxCached {
		clear(c.cache)
	}
	c.cache[key] = cached{entry: e, at: c.now()}
}

func (c *Client) forget(key string) {
	if c.cache != nil {
		delete(c.cache, key)
	}
}
