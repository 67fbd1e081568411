// Package alarmindex is the alarm index in the bucket (book ADR 0009, ADR
// 1048) as logic over a bucket.Bucket: the keys of its entries, the
// owner's operations that keep it equal to each actor's committed alarm
// (List, RemoveReplaced, RemoveStale, with rules R1 to R3), and the pure
// parts of the sweep every node runs (ReadOverdue, Plan). It reads no
// clock (times are arguments), draws its nonces from a source it is handed
// and has no network of its own, so the node and a seeded simulation run
// the same code. It runs on an app's state view (bucket.Under the app's
// state root), so its keys start with alarms/.
//
// An entry, an object whose body is empty (or the actor's full name, when
// its key holds only a shortened one):
//
//	alarms/<tenant>/<due ms, 15 digits>/<class>.t/<name>/<generation, 20 digits>-<nonce, 16 hex>
//
// The due time comes first at a fixed width, so a listing of the index
// gives earlier times first whatever a store does across a "/" (the keys of
// two times first differ at a digit). The name is the actor's key segment
// as its history and ownership record name it (history.EncodeName). The
// last segment, the tag, is the generation of the hold that wrote the entry
// and a nonce, so no two writes share a key (R1).
package alarmindex

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
)

// Prefix is where the index is in an app's state view.
const Prefix = "alarms/"

// classMark ends an entry's class segment: a class name holds no ".", so
// the segment is never mistaken for another family's (the book's tagged
// folder; there are no untagged entries here).
const classMark = ".t"

// MaxAt is the latest due time a key can hold: 15 digits of ms, the year
// 33658.
const MaxAt = 999_999_999_999_999

const (
	atDigits    = 15
	genDigits   = 20
	nonceDigits = 16
)

// Tag is an entry's last segment: the generation of the hold that wrote
// it and a nonce. Its zero value is no tag.
type Tag struct {
	Gen   uint64
	Nonce uint64
}

// IsZero reports the zero Tag.
func (t Tag) IsZero() bool { return t == Tag{} }

// String is the tag as a key holds it: <generation, 20 digits>-<nonce, 16
// lowercase hex digits>.
func (t Tag) String() string { return fmt.Sprintf("%0*d-%0*x", genDigits, t.Gen, nonceDigits, t.Nonce) }

// ParseTag parses a tag strictly: exactly the shape String writes, with a
// generation of at least 1.
func ParseTag(s string) (Tag, error) {
	g, n, ok := strings.Cut(s, "-")
	if !ok {
		return Tag{}, fmt.Errorf("tag %q is not <generation>-<nonce>", s)
	}
	gen, err := fixedDigits(g, genDigits, 10)
	if err != nil {
		return Tag{}, fmt.Errorf("tag %q: generation %w", s, err)
	}
	if gen == 0 {
		return Tag{}, fmt.Errorf("tag %q: generation 0 (generations start at 1)", s)
	}
	nonce, err := fixedDigits(n, nonceDigits, 16)
	if err != nil {
		return Tag{}, fmt.Errorf("tag %q: nonce %w", s, err)
	}
	return Tag{Gen: gen, Nonce: nonce}, nil
}

// fixedDigits parses exactly width digits of base (10, or 16 in
// lowercase).
func fixedDigits(s string, width, base int) (uint64, error) {
	what := "decimal"
	if base == 16 {
		what = "lowercase hex"
	}
	if len(s) != width || strings.ToLower(s) != s {
		return 0, fmt.Errorf("%q is not %d %s digits", s, width, what)
	}
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not %d %s digits", s, width, what)
	}
	return v, nil
}

func formatAt(at int64) string { return fmt.Sprintf("%0*d", atDigits, at) }

func checkAt(at int64) error {
	if at < 0 || at > MaxAt {
		return fmt.Errorf("due time %d ms is outside 0 to %d", at, int64(MaxAt))
	}
	return nil
}

func parseAt(s string) (int64, error) {
	v, err := fixedDigits(s, atDigits, 10)
	if err != nil {
		return 0, fmt.Errorf("due time %w", err)
	}
	return int64(v), nil
}

// Key is one entry, as its key names it.
type Key struct {
	Tenant, Class string
	// Name is the actor's name as its key segment holds it
	// (history.EncodeName): shortened, for a long name, to a prefix and a
	// hash (Actor says which).
	Name string
	At   int64 // due, in ms since the epoch
	Tag  Tag
}

// KeyFor is the entry of actor a's alarm at at, tagged tag.
func KeyFor(a history.Actor, at int64, tag Tag) (Key, error) {
	name, err := history.EncodeName(a.Name)
	if err != nil {
		return Key{}, fmt.Errorf("alarmindex: %w", err)
	}
	k := Key{Tenant: a.Tenant, Class: a.Class, Name: name, At: at, Tag: tag}
	if err := k.check(); err != nil {
		return Key{}, fmt.Errorf("alarmindex: actor %s: %w", a, err)
	}
	return k, nil
}

func (k Key) check() error {
	switch {
	case !address.ValidIdent(k.Tenant):
		return fmt.Errorf("tenant %q is not [a-z][a-z0-9-]{0,63}", k.Tenant)
	case !address.ValidIdent(k.Class):
		return fmt.Errorf("class %q is not [a-z][a-z0-9-]{0,63}", k.Class)
	case k.Tag.Gen == 0:
		return errors.New("generation 0 (generations start at 1)")
	}
	if _, _, err := history.DecodeName(k.Name); err != nil {
		return fmt.Errorf("name segment: %w", err)
	}
	if err := checkAt(k.At); err != nil {
		return err
	}
	return bucket.CheckKey(k.String())
}

// String is the key in the app's state view.
func (k Key) String() string { return actorAt(k.Tenant, k.Class, k.Name, k.At) + k.Tag.String() }

// Address is the actor's address as the key names it, tenant/class/name
// segment: the same on every node, so the sweep shards by it.
func (k Key) Address() string { return k.Tenant + "/" + k.Class + "/" + k.Name }

// Indexed is the entry the key is, as the owner records it.
func (k Key) Indexed() Indexed { return Indexed{At: k.At, Tag: k.Tag} }

// Actor is the actor the key names. hashed is true when the key holds only
// a shortened name: Actor's Name is then the segment, and ResolveActor
// reads the full name from the entry.
func (k Key) Actor() (a history.Actor, hashed bool, err error) {
	name, hashed, err := history.DecodeName(k.Name)
	if err != nil {
		return history.Actor{}, false, fmt.Errorf("alarmindex: %w", err)
	}
	return history.Actor{Tenant: k.Tenant, Class: k.Class, Name: name}, hashed, nil
}

// TenantPrefix is where a tenant's entries are in the app's state view:
// what a sweep lists.
func TenantPrefix(tenant string) string { return Prefix + tenant + "/" }

// actorAt is the folder of an actor's entries at one time.
func actorAt(tenant, class, name string, at int64) string {
	return TenantPrefix(tenant) + formatAt(at) + "/" + class + classMark + "/" + name + "/"
}

// ParseKey parses a key in the app's state view strictly: exactly the
// shape Key.String writes, every part valid; the error names the part that
// is not.
func ParseKey(key string) (Key, error) {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return Key{}, fmt.Errorf("alarmindex: %q is not under %s", key, Prefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 {
		return Key{}, fmt.Errorf("alarmindex: %q is not alarms/<tenant>/<due>/<class>.t/<name>/<tag> (%d segments after alarms/)", key, len(parts))
	}
	var k Key
	k.Tenant = parts[0]
	if !address.ValidIdent(k.Tenant) {
		return Key{}, fmt.Errorf("alarmindex: %q: tenant %q is not [a-z][a-z0-9-]{0,63}", key, k.Tenant)
	}
	var err error
	if k.At, err = parseAt(parts[1]); err != nil {
		return Key{}, fmt.Errorf("alarmindex: %q: %w", key, err)
	}
	if k.Class, ok = strings.CutSuffix(parts[2], classMark); !ok {
		return Key{}, fmt.Errorf("alarmindex: %q: class segment %q does not end in %s", key, parts[2], classMark)
	}
	if !address.ValidIdent(k.Class) {
		return Key{}, fmt.Errorf("alarmindex: %q: class %q is not [a-z][a-z0-9-]{0,63}", key, k.Class)
	}
	k.Name = parts[3]
	if _, _, err := history.DecodeName(k.Name); err != nil {
		return Key{}, fmt.Errorf("alarmindex: %q: name segment: %w", key, err)
	}
	if k.Tag, err = ParseTag(parts[4]); err != nil {
		return Key{}, fmt.Errorf("alarmindex: %q: %w", key, err)
	}
	if err := bucket.CheckKey(key); err != nil {
		return Key{}, fmt.Errorf("alarmindex: %w", err)
	}
	return k, nil
}

// Indexed is the entry an actor's database records as its alarm's
// (alarm_indexed): the zero value for none.
type Indexed struct {
	At  int64
	Tag Tag
}

// None reports that no entry is recorded.
func (x Indexed) None() bool { return x.Tag.IsZero() }

// Encode renders x as the database records it: <due, 15 digits>/<tag>, the
// tail of its key; "" for none.
func (x Indexed) Encode() string {
	if x.None() {
		return ""
	}
	return formatAt(x.At) + "/" + x.Tag.String()
}

func (x Indexed) String() string {
	if x.None() {
		return "none"
	}
	return x.Encode()
}

// ParseIndexed parses a recorded entry strictly ("" is none).
func ParseIndexed(s string) (Indexed, error) {
	if s == "" {
		return Indexed{}, nil
	}
	at, tag, ok := strings.Cut(s, "/")
	if !ok {
		return Indexed{}, fmt.Errorf("alarmindex: recorded entry %q is not <due>/<tag>", s)
	}
	var x Indexed
	var err error
	if x.At, err = parseAt(at); err != nil {
		return Indexed{}, fmt.Errorf("alarmindex: recorded entry %q: %w", s, err)
	}
	if x.Tag, err = ParseTag(tag); err != nil {
		return Indexed{}, fmt.Errorf("alarmindex: recorded entry %q: %w", s, err)
	}
	return x, nil
}

// Key is the entry x names for actor a.
func (x Indexed) Key(a history.Actor) (Key, error) {
	if x.None() {
		return Key{}, errors.New("alarmindex: no entry is recorded")
	}
	return KeyFor(a, x.At, x.Tag)
}
