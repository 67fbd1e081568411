package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/hkdf"
)

// formatLine starts every sealed object and is the format's name in the
// key derivation and the associated data.
const formatLine = "wasmkeep-secrets 1"

// maxObject bounds a sealed object: the plaintext in hex, its tag, and the
// header. A larger one is refused unread.
const maxObject = 2*(MaxPlaintext+chacha20poly1305.Overhead) + 4<<10

var (
	// ErrNoKey: the set is sealed and no key was given to open it.
	ErrNoKey = errors.New("no secrets key was given")
	// ErrOtherKey: the set is sealed under a key that was not given.
	ErrOtherKey = errors.New("sealed under another key")
	// ErrOtherPlace: the object was sealed for another prefix, app or seq
	// (copied there), as its header says.
	ErrOtherPlace = errors.New("sealed for another place")
	// ErrAltered: the object does not open: altered, truncated, or not a
	// sealed set.
	ErrAltered = errors.New("altered or corrupt")
)

// sealed is an object's header: what can be read without a key.
type sealed struct {
	keyID string
	place string // the location it was sealed for (Place.location)
	nonce []byte
	box   []byte // ciphertext and tag
}

// The object's lines: the format, the key id, the location it was sealed
// for, the nonce and the ciphertext, in hex. The location is also in the
// associated data: in the header it only lets a refusal say where an
// object was copied from.
func (s sealed) format() []byte {
	return fmt.Appendf(nil, "%s\n%s\n%s\n%s\n%s\n", formatLine, s.keyID, s.place, hex.EncodeToString(s.nonce), hex.EncodeToString(s.box))
}

func parseSealed(key string, data []byte) (sealed, error) {
	lines := strings.Split(string(data), "\n")
	bad := func(why string) (sealed, error) {
		return sealed{}, fmt.Errorf("%s: %w: %s", key, ErrAltered, why)
	}
	if len(lines) != 6 || lines[5] != "" {
		return bad("not five lines")
	}
	if lines[0] != formatLine {
		return bad("its first line is not " + formatLine)
	}
	s := sealed{keyID: lines[1], place: lines[2]}
	if id, err := hex.DecodeString(s.keyID); err != nil || len(id) != 8 {
		return bad("its key id is not 16 hex digits")
	}
	var err error
	if s.nonce, err = hex.DecodeString(lines[3]); err != nil || len(s.nonce) != chacha20poly1305.NonceSize {
		return bad("its nonce is not 24 hex digits")
	}
	if s.box, err = hex.DecodeString(lines[4]); err != nil || len(s.box) < chacha20poly1305.Overhead {
		return bad("its ciphertext is not hex, or too short")
	}
	return s, nil
}

// field appends s prefixed by its length, 4 bytes big-endian, so that no
// two lists of fields encode the same (a tenant/app split moved included).
func field(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// appKey derives the key of one app at one prefix: HKDF-SHA256 with salt
// "wasmkeep-secrets" and as info the format, the prefix, tenant and app.
// One secrets key serves several apps and prefixes without them sharing a
// nonce budget.
func appKey(k Key, p Place) []byte {
	var info []byte
	for _, f := range []string{formatLine, p.Prefix, p.App.Tenant, p.App.App} {
		info = field(info, f)
	}
	out := make([]byte, chacha20poly1305.KeySize)
	if _, err := hkdf.New(sha256.New, k.raw[:], []byte("wasmkeep-secrets"), info).Read(out); err != nil {
		panic(err) // 32 bytes are far below HKDF-SHA256's limit
	}
	return out
}

// associated binds an object to its format, prefix, tenant, app, seq and
// key id: copied anywhere else, it does not open.
func associated(p Place, seq uint64, keyID string) []byte {
	var ad []byte
	for _, f := range []string{formatLine, p.Prefix, p.App.Tenant, p.App.App, seqName(seq), keyID} {
		ad = field(ad, f)
	}
	return ad
}

// seal seals plaintext for p's object seq under k, with a random 96-bit
// nonce (a handful of objects per derived key: far below the bound for
// random nonces).
func seal(k Key, p Place, seq uint64, plaintext []byte) ([]byte, error) {
	aead, err := chacha20poly1305.New(appKey(k, p))
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	s := sealed{keyID: k.ID(), place: p.location(seq), nonce: nonce}
	s.box = aead.Seal(nil, nonce, plaintext, associated(p, seq, k.ID()))
	return s.format(), nil
}

// open opens p's object seq with whichever of keys sealed it. Errors name
// the object, the key ids and what is wrong, never the content.
func open(keys []Key, p Place, seq uint64, data []byte) (Set, string, error) {
	at := p.location(seq)
	s, err := parseSealed(at, data)
	if err != nil {
		return Set{}, "", err
	}
	if s.place != at {
		return Set{}, s.keyID, fmt.Errorf("%s: %w: its header names %s (copied from there?): refused", at, ErrOtherPlace, quoteAtMost(s.place, 200))
	}
	if len(keys) == 0 {
		return Set{}, s.keyID, fmt.Errorf("%s is sealed under key %s: %w", at, s.keyID, ErrNoKey)
	}
	var k *Key
	for i := range keys {
		if keys[i].ID() == s.keyID {
			k = &keys[i]
		}
	}
	if k == nil {
		return Set{}, s.keyID, fmt.Errorf("%s is %w: %s, not %s given", at, ErrOtherKey, s.keyID, keyIDs(keys))
	}
	aead, err := chacha20poly1305.New(appKey(*k, p))
	if err != nil {
		return Set{}, s.keyID, err
	}
	plain, err := aead.Open(nil, s.nonce, s.box, associated(p, seq, s.keyID))
	if err != nil {
		return Set{}, s.keyID, fmt.Errorf("%s: %w: it does not open under key %s, which its header names (changed, or its header moved from another object): refused", at, ErrAltered, s.keyID)
	}
	set, err := ParsePlaintext(at, plain)
	if err != nil {
		// Authentic but unreadable: written by a broken sealer. The parse
		// error names entries, never values.
		return Set{}, s.keyID, fmt.Errorf("%w (the sealed set does not parse)", err)
	}
	return set, s.keyID, nil
}

func keyIDs(keys []Key) string {
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.ID())
	}
	return "the key " + strings.Join(ids, " or ")
}

// quoteAtMost quotes the first max bytes of s (a header line the bucket
// gave, which may be anything), saying when it was cut.
func quoteAtMost(s string, max int) string {
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + fmt.Sprintf(" (cut, %d bytes in all)", len(s))
}
