// Package history is an actor's history in the bucket as pure logic (book:
// "History in the bucket", book ADR 0007, book ADR 0012): the keys of its segments and
// snapshots, restore planning from a listing, the garbage-collection rule,
// and LTX v3 segments (github.com/superfly/ltx). It does no I/O of its own
// beyond the readers and files it is handed, reads no clock (times are
// arguments) and imports no plugin, so the server and a simulation run the
// same code. ADR 1020 says what the book left open.
//
// Keys, under an actor's prefix actors/<tenant>/<class>/<name>/:
//
//	wal/<txid:016x>-<generation:016x>-<parent generation:016x>.ltx
//	snapshot/<txid:016x>-<generation:016x>.ltx
//
// A segment is transaction txid written by a hold of generation generation,
// applied on the segment at txid-1 written by parent generation (0 for
// transaction 1, on the empty database). A snapshot is the database at
// position (txid, generation). Fixed-width hex makes listing order
// transaction order within one directory.
package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// Actor names an actor: tenant and class follow the book's rule for
// identifiers, the name is any text the node accepts (1 to 256 bytes, no /,
// no control character, not . or ..).
type Actor struct {
	Tenant, Class, Name string
}

func (a Actor) String() string { return a.Tenant + "/" + a.Class + "/" + a.Name }

// Kind tells a segment from a snapshot.
type Kind uint8

const (
	Segment Kind = iota + 1
	Snapshot
)

func (k Kind) String() string {
	switch k {
	case Segment:
		return "segment"
	case Snapshot:
		return "snapshot"
	}
	return "unknown"
}

// Key is one history object, parsed from its key. Parent is 0 for a
// snapshot.
type Key struct {
	Kind   Kind
	TXID   uint64
	Gen    uint64
	Parent uint64
}

// Pos is a position in the tree of histories: the database after
// transaction TXID as generation Gen wrote it.
type Pos struct {
	TXID, Gen uint64
}

// Pos is where k leaves the database.
func (k Key) Pos() Pos { return Pos{TXID: k.TXID, Gen: k.Gen} }

func (p Pos) String() string { return fmt.Sprintf("txid %d generation %d", p.TXID, p.Gen) }

func (k Key) String() string {
	if k.Kind == Snapshot {
		return fmt.Sprintf("snapshot at txid %d generation %d", k.TXID, k.Gen)
	}
	return fmt.Sprintf("segment txid %d generation %d on generation %d", k.TXID, k.Gen, k.Parent)
}

// Rel is k's key relative to its actor's prefix.
func (k Key) Rel() string {
	if k.Kind == Snapshot {
		return fmt.Sprintf("snapshot/%016x-%016x.ltx", k.TXID, k.Gen)
	}
	return fmt.Sprintf("wal/%016x-%016x-%016x.ltx", k.TXID, k.Gen, k.Parent)
}

// Check refuses a key no writer may create: txid and generation start at 1,
// a segment's parent generation is 0 exactly at transaction 1 and never
// above its own, and a snapshot has no parent.
func (k Key) Check() error {
	switch {
	case k.Kind != Segment && k.Kind != Snapshot:
		return errors.New("neither a segment nor a snapshot")
	case k.TXID == 0:
		return errors.New("transaction id 0")
	case k.Gen == 0:
		return errors.New("generation 0")
	case k.Kind == Snapshot && k.Parent != 0:
		return errors.New("a snapshot has no parent generation")
	case k.Kind == Segment && k.TXID == 1 && k.Parent != 0:
		return fmt.Errorf("transaction 1 is applied on the empty database (parent generation 0), not on generation %d", k.Parent)
	case k.Kind == Segment && k.TXID > 1 && k.Parent == 0:
		return fmt.Errorf("transaction %d has parent generation 0", k.TXID)
	case k.Kind == Segment && k.Parent > k.Gen:
		return fmt.Errorf("parent generation %d is above generation %d", k.Parent, k.Gen)
	}
	return nil
}

// Prefix is the actor's prefix, ending in /, its name encoded by
// EncodeName. It refuses an address no key can hold.
func Prefix(a Actor) (string, error) {
	for _, part := range []struct{ what, s string }{{"tenant", a.Tenant}, {"class", a.Class}} {
		if !validIdent(part.s) {
			return "", fmt.Errorf("history: %s %q is not [a-z][a-z0-9-]{0,63}", part.what, part.s)
		}
	}
	name, err := EncodeName(a.Name)
	if err != nil {
		return "", err
	}
	p := EncodedPrefix(a.Tenant, a.Class, name)
	if err := bucket.CheckPrefix(p); err != nil {
		return "", fmt.Errorf("history: actor %s: %w", a, err)
	}
	return p, nil
}

// Exists reports whether a has any history in b: one listing of its
// prefix that reads no further than the first key. A deleted actor's
// reset and its snapshot are history too (book ADR 0028).
func Exists(ctx context.Context, b bucket.Bucket, a Actor) (bool, error) {
	prefix, err := Prefix(a)
	if err != nil {
		return false, err
	}
	page, err := b.List(ctx, prefix, bucket.ListOptions{Limit: 1})
	if err != nil {
		return false, fmt.Errorf("history: list %s: %w", prefix, err)
	}
	return len(page.Entries) > 0, nil
}

// ObjectKey is k's full key under a's prefix.
func ObjectKey(a Actor, k Key) (string, error) {
	if err := k.Check(); err != nil {
		return "", fmt.Errorf("history: %s: %w", k, err)
	}
	p, err := Prefix(a)
	if err != nil {
		return "", err
	}
	key := p + k.Rel()
	if err := bucket.CheckKey(key); err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	return key, nil
}

// ParseRel parses a key relative to an actor's prefix, strictly: exactly
// the two shapes above, lowercase fixed-width hex, and a key Check accepts.
// Anything else is an error naming what is wrong, never a guess.
func ParseRel(rel string) (Key, error) {
	var k Key
	var fields []string
	switch {
	case strings.HasPrefix(rel, "wal/"):
		k.Kind = Segment
		fields = strings.Split(strings.TrimPrefix(rel, "wal/"), "-")
		if len(fields) != 3 {
			return Key{}, fmt.Errorf("history: %q: a segment key is wal/<txid>-<generation>-<parent>.ltx", rel)
		}
	case strings.HasPrefix(rel, "snapshot/"):
		k.Kind = Snapshot
		fields = strings.Split(strings.TrimPrefix(rel, "snapshot/"), "-")
		if len(fields) != 2 {
			return Key{}, fmt.Errorf("history: %q: a snapshot key is snapshot/<txid>-<generation>.ltx", rel)
		}
	default:
		return Key{}, fmt.Errorf("history: %q is neither under wal/ nor under snapshot/", rel)
	}
	last := len(fields) - 1
	var ok bool
	if fields[last], ok = strings.CutSuffix(fields[last], ".ltx"); !ok {
		return Key{}, fmt.Errorf("history: %q does not end in .ltx", rel)
	}
	nums := make([]uint64, len(fields))
	for i, f := range fields {
		if len(f) != 16 || strings.ToLower(f) != f {
			return Key{}, fmt.Errorf("history: %q: %q is not 16 lowercase hex digits", rel, f)
		}
		n, err := strconv.ParseUint(f, 16, 64)
		if err != nil {
			return Key{}, fmt.Errorf("history: %q: %q is not 16 lowercase hex digits", rel, f)
		}
		nums[i] = n
	}
	k.TXID, k.Gen = nums[0], nums[1]
	if k.Kind == Segment {
		k.Parent = nums[2]
	}
	if err := k.Check(); err != nil {
		return Key{}, fmt.Errorf("history: %q: %w", rel, err)
	}
	return k, nil
}

// EncodeName percent-encodes an actor name into one key segment: every
// byte but A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase hex), as the node
// encodes names in addresses. A name whose encoding is longer than
// MaxNameSegment keeps the first bytes of its encoding (never half an
// escape) and ends in %~ and 32 hex digits of its SHA-256: "%~" is no valid
// escape, so a shortened name never equals an encoded one. The names the
// node refuses ("", ".", "..", over 256 bytes, a / or control byte) are
// refused here too.
func EncodeName(name string) (string, error) {
	switch {
	case name == "" || name == "." || name == "..":
		return "", fmt.Errorf("history: actor name %q cannot name an actor", name)
	case len(name) > 256:
		return "", fmt.Errorf("history: actor name is %d bytes long (at most 256)", len(name))
	}
	const hexDigits = "0123456789ABCDEF"
	enc := make([]byte, 0, len(name))
	for _, c := range []byte(name) {
		switch {
		case c == '/' || c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("history: actor name %q holds a / or a control character", name)
		case unreserved(c):
			enc = append(enc, c)
		default:
			enc = append(enc, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	if len(enc) <= MaxNameSegment {
		return string(enc), nil
	}
	cut := MaxNameSegment - len(hashMark) - 32
	for cut > 0 && (enc[cut-1] == '%' || cut >= 2 && enc[cut-2] == '%') {
		cut-- // keep whole escapes
	}
	sum := sha256.Sum256([]byte(name))
	return string(enc[:cut]) + hashMark + hex.EncodeToString(sum[:16]), nil
}

// MaxNameSegment is the longest encoded name: a name segment stays well
// inside bucket.MaxSegmentLen and the whole key inside bucket.MaxKeyLen,
// under the longest app's state root too (136 bytes; the longest key is
// then 532 of the 960).
const MaxNameSegment = 200

const hashMark = "%~"

// DecodeName reverses EncodeName. hashed is true for a shortened name,
// whose full text the key no longer holds (name is then the encoded
// segment as it is). Any encoding EncodeName would not write is an error.
func DecodeName(seg string) (name string, hashed bool, err error) {
	if i := strings.Index(seg, hashMark); i >= 0 {
		if len(seg) > MaxNameSegment || len(seg)-i != len(hashMark)+32 || !isLowerHex(seg[i+len(hashMark):]) {
			return "", false, fmt.Errorf("history: %q is not a shortened actor name", seg)
		}
		if _, _, err := DecodeName(seg[:i]); err != nil {
			return "", false, err
		}
		return seg, true, nil
	}
	var b []byte
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case unreserved(c):
			b = append(b, c)
		case c == '%' && i+2 < len(seg) && isUpperHex(seg[i+1]) && isUpperHex(seg[i+2]):
			v := unhex(seg[i+1])<<4 | unhex(seg[i+2])
			if unreserved(v) {
				return "", false, fmt.Errorf("history: %q escapes %q, which is written as it is", seg, string(rune(v)))
			}
			b = append(b, v)
			i += 2
		default:
			return "", false, fmt.Errorf("history: %q is not an encoded actor name (at byte %d)", seg, i)
		}
	}
	name = string(b)
	if again, err := EncodeName(name); err != nil || again != seg {
		return "", false, fmt.Errorf("history: %q is not an encoded actor name", seg)
	}
	return name, false, nil
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

func validIdent(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Object is one object of a listing, parsed.
type Object struct {
	Key   Key
	Entry bucket.Entry
}

// Listing is an actor's prefix as listed: its history objects, and every
// other key under the prefix (Unknown), reported and never used or
// collected.
type Listing struct {
	Objects []Object
	Unknown []bucket.Entry
}

// EncodedPrefix is Prefix for a name already encoded (EncodeName), as an
// ownership record names the actor; it checks nothing.
func EncodedPrefix(tenant, class, name string) string {
	return "actors/" + tenant + "/" + class + "/" + name + "/"
}

// Generation is the highest generation among the listing's objects, 0 for
// none: a new hold of the actor must write above it.
func (l Listing) Generation() uint64 {
	var g uint64
	for _, o := range l.Objects {
		g = max(g, o.Key.Gen)
	}
	return g
}

// ParseListing parses the entries of a listing of prefix (as Prefix gave
// it). An entry outside the prefix is an error: the caller listed something
// else.
func ParseListing(prefix string, entries []bucket.Entry) (Listing, error) {
	var l Listing
	for _, e := range entries {
		rel, ok := strings.CutPrefix(e.Key, prefix)
		if !ok {
			return Listing{}, fmt.Errorf("history: %q is not under %q", e.Key, prefix)
		}
		k, err := ParseRel(rel)
		if err != nil {
			l.Unknown = append(l.Unknown, e)
			continue
		}
		l.Objects = append(l.Objects, Object{Key: k, Entry: e})
	}
	return l, nil
}
