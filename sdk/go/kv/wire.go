package kv

import (
	"bytes"
	"errors"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
)

// The protocol between Client and shard (docs/sdk-protocols.md, "Key-value"):
// POST to one path per operation, bodies in the ABI's encoding.
const (
	pathPrefix = "/wasmkeep-kv/v1/"
	pathGet    = pathPrefix + "get"
	pathPut    = pathPrefix + "put"
	pathDelete = pathPrefix + "delete"
	pathList   = pathPrefix + "list"
)

// flagLocal in a put's flags asks for a local write.
const flagLocal = 1

type getRequest struct{ key []byte }

type putRequest struct {
	key, value []byte
	expect     Expect
	ttlMs      uint64
	flags      uint8
}

type deleteRequest struct {
	key    []byte
	expect Expect
}

type listRequest struct {
	prefix   []byte
	hasAfter bool
	after    []byte
	limit    uint32
}

func appendExpect(b []byte, e Expect) []byte {
	return abi.AppendU64(append(b, e.kind), e.version)
}

func readExpect(r *abi.Reader) Expect { return Expect{kind: r.U8(), version: r.U64()} }

// checkExpect refuses an expectation of an unknown kind.
func checkExpect(e Expect, err error) error {
	if err == nil && e.kind > expectVersion {
		return errBadExpect
	}
	return err
}

func encodeGet(key string) []byte { return abi.AppendString(nil, key) }

func decodeGet(b []byte) (getRequest, error) {
	r := abi.NewReader(b)
	q := getRequest{key: r.Bytes()}
	return q, r.Done()
}

func encodePut(key string, value []byte, o PutOptions) []byte {
	b := abi.AppendString(nil, key)
	b = abi.AppendBytes(b, value)
	b = appendExpect(b, o.Expect)
	b = abi.AppendU64(b, uint64(o.TTLMs))
	var flags uint8
	if o.Local {
		flags |= flagLocal
	}
	return append(b, flags)
}

func decodePut(b []byte) (putRequest, error) {
	r := abi.NewReader(b)
	q := putRequest{key: r.Bytes(), value: r.Bytes(), expect: readExpect(r), ttlMs: r.U64(), flags: r.U8()}
	return q, checkExpect(q.expect, r.Done())
}

func encodeDelete(key string, e Expect) []byte {
	return appendExpect(abi.AppendString(nil, key), e)
}

func decodeDelete(b []byte) (deleteRequest, error) {
	r := abi.NewReader(b)
	q := deleteRequest{key: r.Bytes(), expect: readExpect(r)}
	return q, checkExpect(q.expect, r.Done())
}

func encodeList(prefix string, after *string, limit uint32) []byte {
	b := abi.AppendString(nil, prefix)
	if after == nil {
		b = abi.AppendBytes(append(b, 0), nil)
	} else {
		b = abi.AppendString(append(b, 1), *after)
	}
	return abi.AppendU32(b, limit)
}

func decodeList(b []byte) (listRequest, error) {
	r := abi.NewReader(b)
	q := listRequest{prefix: r.Bytes(), hasAfter: r.U8() == 1, after: r.Bytes(), limit: r.U32()}
	return q, r.Done()
}

// Replies.

func encodeEntry(e *Entry) []byte {
	if e == nil {
		return []byte{0}
	}
	b := abi.AppendBytes([]byte{1}, e.Value)
	b = abi.AppendU64(b, e.Version)
	return abi.AppendU64(b, uint64(e.ExpiresAt))
}

func decodeEntry(b []byte) (*Entry, error) {
	r := abi.NewReader(b)
	if r.U8() == 0 {
		return nil, r.Done()
	}
	e := &Entry{Value: r.Bytes(), Version: r.U64(), ExpiresAt: int64(r.U64())}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return e, nil
}

func encodeVersion(v uint64) []byte { return abi.AppendU64(nil, v) }

func decodeVersion(b []byte) (uint64, error) {
	r := abi.NewReader(b)
	v := r.U64()
	return v, r.Done()
}

func encodeBool(ok bool) []byte {
	if ok {
		return []byte{1}
	}
	return []byte{0}
}

func decodeBool(b []byte) (bool, error) {
	r := abi.NewReader(b)
	v := r.U8()
	return v == 1, r.Done()
}

func encodeKeys(keys [][]byte) []byte {
	b := abi.AppendU32(nil, uint32(len(keys)))
	for _, k := range keys {
		b = abi.AppendBytes(b, k)
	}
	return b
}

func decodeKeys(b []byte) ([]string, error) {
	r := abi.NewReader(b)
	n := r.Count(4)
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		keys = append(keys, string(r.Bytes()))
	}
	return keys, r.Done()
}

var errBadExpect = errors.New("unknown expectation")

// prefixEnd is the smallest byte string greater than every string that
// starts with prefix, and false if there is none (the prefix is empty or
// all 0xff): the upper bound of a prefix's range.
func prefixEnd(prefix []byte) ([]byte, bool) {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1], true
		}
	}
	return nil, false
}
