package callsign

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// SecretKey is where the cluster's call secret is in the bucket: created
// once, by the first node that finds it absent, and never changed by a
// node (an operator rotates it by replacing the object and restarting the
// nodes).
const SecretKey = "cluster/secret"

// secretHeader is the first line of the stored secret; the second is its
// 32 bytes in hex.
const secretHeader = "wasmkeep-secret 1"

// secretLen is the secret's length in bytes: HMAC-SHA256's block holds it
// whole, and 256 bits is SHA-256's own strength.
const secretLen = 32

// ErrMalformedSecret: cluster/secret is there but is not a secret this
// version reads. Calls between nodes then stop (the caller refuses them)
// rather than go on under a weaker or guessed key.
var ErrMalformedSecret = errors.New("callsign: malformed cluster secret")

// Secret is the key nodes sign their calls with. The zero Secret is no key:
// a Verifier made with it refuses every call. It never prints its bytes.
type Secret struct {
	key []byte
}

// String hides the key.
func (s Secret) String() string {
	if s.key == nil {
		return "callsign.Secret(none)"
	}
	return "callsign.Secret(redacted)"
}

// Format hides the key whatever the verb (%x and %d included).
func (s Secret) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// encodeSecret renders the stored form:
//
//	wasmkeep-secret 1
//	<the 32 bytes, lowercase hex>
func encodeSecret(key []byte) []byte {
	return fmt.Appendf(nil, "%s\n%s\n", secretHeader, hex.EncodeToString(key))
}

// parseSecret reads the stored form; the final newline may be missing (an
// operator's editor), anything else is ErrMalformedSecret. The error never
// quotes the object: it may be a secret of another format.
func parseSecret(data []byte) (Secret, error) {
	head, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || string(head) != secretHeader {
		return Secret{}, fmt.Errorf("%w: %s does not start with the line %q", ErrMalformedSecret, SecretKey, secretHeader)
	}
	rest = bytes.TrimSuffix(rest, []byte("\n"))
	if len(rest) != 2*secretLen {
		return Secret{}, fmt.Errorf("%w: %s's second line is %d characters, not the %d hex digits of %d bytes",
			ErrMalformedSecret, SecretKey, len(rest), 2*secretLen, secretLen)
	}
	key := make([]byte, secretLen)
	if _, err := hex.Decode(key, rest); err != nil {
		return Secret{}, fmt.Errorf("%w: %s's second line is not hex", ErrMalformedSecret, SecretKey)
	}
	return Secret{key: key}, nil
}

// LoadSecret reads cluster/secret, creating it if absent: 32 random bytes
// written with a conditional create, so that of nodes starting together
// one writes and the others read what it wrote (a create refused because
// another node won is followed by a read). A secret is returned only once
// the bucket holds it: a create whose reply was lost is an error, and the
// next call reads what landed. A malformed object is an error wrapping
// ErrMalformedSecret; a bucket error is returned as it is (the caller
// retries).
func LoadSecret(ctx context.Context, b bucket.Bucket) (Secret, error) {
	// Three rounds: a read, a refused create, a read of the winner's is
	// two; a third is for an operator deleting the object meanwhile.
	for range 3 {
		s, err := readSecret(ctx, b)
		if !errors.Is(err, bucket.ErrNotFound) {
			return s, err
		}
		key := make([]byte, secretLen)
		rand.Read(key) // never fails (crypto/rand, Go 1.24+)
		body := encodeSecret(key)
		_, err = b.Put(ctx, SecretKey, bytes.NewReader(body), int64(len(body)), bucket.Condition{IfAbsent: true})
		if err == nil {
			return Secret{key: key}, nil
		}
		if !errors.Is(err, bucket.ErrPrecondition) {
			return Secret{}, err
		}
	}
	return Secret{}, fmt.Errorf("callsign: %s was created and then gone three times", SecretKey)
}

// readSecret reads and parses cluster/secret; an absent one is the
// bucket's ErrNotFound.
func readSecret(ctx context.Context, b bucket.Bucket) (Secret, error) {
	o, err := b.Get(ctx, SecretKey, bucket.GetOptions{})
	if err != nil {
		return Secret{}, err
	}
	defer o.Body.Close()
	// The stored form is 83 bytes; a much larger object is not ours, and
	// reading it whole would only cost memory.
	data, err := io.ReadAll(io.LimitReader(o.Body, 1<<10+1))
	if err != nil {
		return Secret{}, err
	}
	if len(data) > 1<<10 {
		return Secret{}, fmt.Errorf("%w: %s is over 1 KiB", ErrMalformedSecret, SecretKey)
	}
	return parseSecret(data)
}
