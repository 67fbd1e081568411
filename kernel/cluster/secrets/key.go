package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// KeySize is a secrets key's length in bytes; a key file holds it as 64 hex
// characters.
const KeySize = 32

// Key is a secrets key. Its bytes never leave the package: printed, it is
// its id.
type Key struct {
	raw [KeySize]byte
	id  string
}

// ID names the key without revealing it: the first 8 bytes of
// SHA-256("wasmkeep-secrets-key-id" || key), in hex.
func (k Key) ID() string { return k.id }

// String and GoString show the id only, so a key printed by mistake is not
// leaked.
func (k Key) String() string   { return "key " + k.id }
func (k Key) GoString() string { return "secrets.Key{" + k.id + "}" }

func newKey(raw [KeySize]byte) Key {
	sum := sha256.Sum256(append([]byte("wasmkeep-secrets-key-id"), raw[:]...))
	return Key{raw: raw, id: hex.EncodeToString(sum[:8])}
}

// ParseKey reads a key file's content: 64 hex characters and an optional
// trailing newline, nothing else. source names it in errors, which never
// quote the content.
func ParseKey(source string, data []byte) (Key, error) {
	s := strings.TrimSuffix(string(data), "\n")
	var raw [KeySize]byte
	if len(s) != 2*KeySize {
		return Key{}, fmt.Errorf("%s: a secrets key is %d hex characters and an optional newline; this holds %d bytes (make one with wasmkeep secrets new-key)", source, 2*KeySize, len(data))
	}
	if _, err := hex.Decode(raw[:], []byte(s)); err != nil {
		return Key{}, fmt.Errorf("%s: a secrets key is %d hex characters; this holds other bytes (make one with wasmkeep secrets new-key)", source, 2*KeySize)
	}
	return newKey(raw), nil
}

// ErrKeyFileMode: a key file its group or others can read.
var ErrKeyFileMode = errors.New("readable by its group or others")

// LoadKeyFile reads a key file. One its group or others can read (mode &
// 0o077; a symlink's target counts) is refused, naming the file and its
// mode, before it is read; so is anything but a regular file. Windows has
// no such modes and nothing is checked there.
func LoadKeyFile(path string) (Key, error) {
	info, err := os.Stat(path)
	if err != nil {
		return Key{}, fmt.Errorf("secrets key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return Key{}, fmt.Errorf("secrets key %s: not a regular file (%s)", path, info.Mode())
	}
	if perm := info.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		return Key{}, fmt.Errorf("secrets key %s: mode %04o is %w: refused; chmod 600 it (a Kubernetes secret: defaultMode 0400)", path, perm, ErrKeyFileMode)
	}
	f, err := os.Open(path)
	if err != nil {
		return Key{}, fmt.Errorf("secrets key: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 2*KeySize+2))
	if err != nil {
		return Key{}, fmt.Errorf("secrets key %s: %w", path, err)
	}
	return ParseKey("secrets key "+path, data)
}

// NewKeyFile writes a new key from the system's random source to path, a
// file it creates with mode 0600 and that must not exist, and returns its
// id. It never prints the key: output redirected to a file would create
// it under the shell's umask.
func NewKeyFile(path string) (string, error) {
	var raw [KeySize]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%s exists: refused (a key is never overwritten; choose another name)", path)
	}
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(hex.EncodeToString(raw[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return newKey(raw).ID(), nil
}
