// Package kv is a key-value store built on ordinary actors, as the book's
// ADR 0015 describes: keys are spread over a fixed number of shard actors of
// one class, <class>/shard-0 .. <class>/shard-<n-1>, each an actor with one
// SQLite table, reached with wasmkeep.Call. The shards get what every actor
// gets (replication, failover, alarms, access rules) and have the same
// limits.
//
// The shard class is one line:
//
//	func init() { kv.Serve() }
//
//	func main() {}
//
// Serve it (as class kv, say) with --access kv=internal, and use it from any
// other actor:
//
//	store := kv.New("kv", 8)              // 8 shards: kv/shard-0 .. kv/shard-7
//	v1, err := store.Put("user:42", []byte("Ada"))  // the new version, once durable
//	entry, err := store.Get("user:42")    // nil if absent
//	_, err = store.CompareAndSet("user:42", kv.Version(v1), []byte("Ada L."))
//	if errors.Is(err, kv.ErrConflict) { /* it moved */ }
//
// Per key, a shard is strongly consistent: it handles one operation at a
// time. Writes return once durable unless a local write is asked for. A
// failed call (ErrCall) is ambiguous: a write may have applied. The wire
// protocol is in docs/sdk-protocols.md.
package kv

import (
	"strconv"

	"github.com/wasmkeep/wasmkeep/sdk/go/internal/actorcall"
)

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 1024

// MaxListLimit is the most keys one List call returns; DefaultListLimit is
// what a limit of 0 (or less) asks for.
const (
	MaxListLimit     = 1000
	DefaultListLimit = 100
)

// ErrorKind says why an operation failed.
type ErrorKind uint8

const (
	Conflict   ErrorKind = iota + 1 // a compare-and-set or a conditional delete found another version (409)
	KeyTooLong                      // the key is over MaxKeyLen bytes; nothing was sent
	Storage                         // the shard's database failed (500)
	Call                            // the call to the shard failed: a write may have applied
	Refused                         // the shard answered another status (Status), or a reply this client cannot read
)

func (k ErrorKind) String() string {
	switch k {
	case Conflict:
		return "conflict"
	case KeyTooLong:
		return "key-too-long"
	case Storage:
		return "storage"
	case Call:
		return "call"
	case Refused:
		return "refused"
	}
	return "kind-" + strconv.Itoa(int(k))
}

// Error is every error of a Client; errors.Is(err, kv.ErrConflict) matches
// by kind, and errors.As gives the fields.
type Error struct {
	Kind    ErrorKind
	Status  int    // the shard's HTTP status, for Refused (200 for a reply that could not be read; 0 if no call was made)
	Message string // the shard's or the host's message
}

func (e *Error) Error() string {
	status := 0
	if e.Kind == Refused {
		status = e.Status
	}
	return actorcall.Describe("kv", e.Kind.String(), status, e.Message)
}

// Is matches any *Error of the same kind, so errors.Is(err, kv.ErrConflict)
// works whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrConflict   = &Error{Kind: Conflict}
	ErrKeyTooLong = &Error{Kind: KeyTooLong}
	ErrStorage    = &Error{Kind: Storage}
	ErrCall       = &Error{Kind: Call}
	ErrRefused    = &Error{Kind: Refused}
)

// Entry is a key's current value.
type Entry struct {
	Value     []byte
	Version   uint64 // changes with every write; never reused within a shard, even after a delete
	ExpiresAt int64  // milliseconds since the Unix epoch; 0: never
}

// Expect is the condition of a write: Any() (the zero Expect), Absent(), or
// Version(v).
type Expect struct {
	kind    uint8
	version uint64
}

const (
	expectAny uint8 = iota
	expectAbsent
	expectVersion
)

// Any is no condition: the zero Expect.
func Any() Expect { return Expect{} }

// Absent holds only if the key has no live value.
func Absent() Expect { return Expect{kind: expectAbsent} }

// Version holds only if the key's current version is v.
func Version(v uint64) Expect { return Expect{kind: expectVersion, version: v} }

// holds reports whether the key's state (present at version, or absent)
// meets e.
func (e Expect) holds(present bool, version uint64) bool {
	switch e.kind {
	case expectAbsent:
		return !present
	case expectVersion:
		return present && version == e.version
	}
	return true
}

func (e Expect) String() string {
	switch e.kind {
	case expectAbsent:
		return "absent"
	case expectVersion:
		return "version " + strconv.FormatUint(e.version, 10)
	}
	return "any"
}

// PutOptions are a write's options; the zero value is a durable,
// unconditional write without expiry.
type PutOptions struct {
	Local  bool   // return once committed on the shard's node, without waiting for durability
	TTLMs  int64  // expire this many milliseconds after the write; 0: never
	Expect Expect // the condition (compare-and-set)
}

// fnv1a is the 64-bit FNV-1a hash.
func fnv1a(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// ShardOf is the index of the shard that holds key among n shards:
// FNV-1a (64 bits) of the key's bytes modulo n, the same in every SDK.
func ShardOf(key string, n int) int { return int(fnv1a(key) % uint64(n)) }
