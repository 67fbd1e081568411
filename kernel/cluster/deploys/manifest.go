// Package deploys keeps an app's versions in the bucket (ADR 1045, book
// ADR 0008 and 0013): the manifest of each version, the current pointer
// and its seq, publishing a version, rolling back, loading what a node
// runs, following current, and collecting old versions. It speaks only to
// a bucket and a clock.
//
//	apps/<t>/<a>/current                "<version> <seq>\n", replaced IfVersion only
//	apps/<t>/<a>/<version>/manifest     immutable, created IfAbsent
//	apps/<t>/<a>/<version>/<class>.wasm
//	apps/<t>/<a>/<version>/<class>.config
//	apps/<t>/<a>/<version>/_front.wasm   (no class name starts with _)
package deploys

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

const manifestHeader = "wasmkeep-manifest 1"

var (
	digestRE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	versionRE = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// Manifest is a version's content: digests, rules and required names,
// never a configuration value.
type Manifest struct {
	Previous string                   // the version this one replaced, "" for the first
	Front    string                   // SHA-256 of the front's module, "" without a front
	Classes  map[string]string        // class to the SHA-256 of its module
	Access   map[string]access.Access // the classes whose rule is not open
	Config   map[string]string        // class to the SHA-256 of its .config object
	Requires map[string][]string      // class to the names it needs set, sorted
	// Expire is, by class, how long an actor may stay idle before it is
	// deleted (ADR 1053): whole seconds, at least MinIdle.
	Expire map[string]time.Duration
}

// MinIdle is the shortest expire-after-idle (book ADR 0028, section 4).
const MinIdle = time.Hour

// MaxIdle is the longest, what a manifest's expire line holds (seconds in
// 32 bits: about 136 years).
const MaxIdle = (1<<32 - 1) * time.Second

// ParseIdle reads an expire-after-idle duration: a whole number of
// seconds, minutes, hours or days (3600s, 90m, 36h, 7d), at least MinIdle
// and at most MaxIdle.
func ParseIdle(s string) (time.Duration, error) {
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}
	if len(s) < 2 || units[s[len(s)-1]] == 0 {
		return 0, fmt.Errorf("%q: want a whole number of seconds, minutes, hours or days (3600s, 90m, 36h, 7d)", s)
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q: want a whole number of seconds, minutes, hours or days (3600s, 90m, 36h, 7d)", s)
	}
	unit := units[s[len(s)-1]]
	if n > uint64(MaxIdle/unit) { // before multiplying, which would overflow
		return 0, fmt.Errorf("%q: at most %v", s, MaxIdle)
	}
	d := time.Duration(n) * unit
	if d < MinIdle {
		return 0, fmt.Errorf("%q: at least %v", s, MinIdle)
	}
	return d, nil
}

// Digest is the hex SHA-256 of b, as a manifest names an object.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Identity is every line of the manifest but its header and previous, each
// group sorted by class: two versions with the same identity run the same.
func (m Manifest) Identity() string {
	var b strings.Builder
	if m.Front != "" {
		fmt.Fprintf(&b, "front %s\n", m.Front)
	}
	for _, c := range slices.Sorted(maps.Keys(m.Classes)) {
		fmt.Fprintf(&b, "class %s %s\n", c, m.Classes[c])
	}
	for _, c := range slices.Sorted(maps.Keys(m.Access)) {
		fmt.Fprintf(&b, "access %s %s\n", c, m.Access[c])
	}
	for _, c := range slices.Sorted(maps.Keys(m.Config)) {
		fmt.Fprintf(&b, "config %s %s\n", c, m.Config[c])
	}
	for _, c := range slices.Sorted(maps.Keys(m.Requires)) {
		fmt.Fprintf(&b, "requires %s %s\n", c, strings.Join(m.Requires[c], ","))
	}
	// Written only for a version with a limit: one without keeps its bytes
	// and its id.
	for _, c := range slices.Sorted(maps.Keys(m.Expire)) {
		fmt.Fprintf(&b, "expire %s %d\n", c, m.Expire[c]/time.Second)
	}
	return b.String()
}

// ID is the version id: the first 16 hex digits of the SHA-256 of the
// identity followed by the previous line, so a directory is never reused
// under another lineage.
func (m Manifest) ID() string {
	s := m.Identity()
	if m.Previous != "" {
		s += "previous " + m.Previous + "\n"
	}
	return Digest([]byte(s))[:16]
}

// Format writes the manifest as ParseManifest reads it.
func (m Manifest) Format() []byte {
	s := manifestHeader + "\n"
	if m.Previous != "" {
		s += "previous " + m.Previous + "\n"
	}
	return []byte(s + m.Identity())
}

// Check refuses what no manifest may hold: a bad name or digest, a rule,
// configuration or required names for a class the version does not have.
func (m Manifest) Check() error {
	if m.Previous != "" && !versionRE.MatchString(m.Previous) {
		return fmt.Errorf("previous %q is not a version id (16 hex digits)", m.Previous)
	}
	if m.Front != "" && !digestRE.MatchString(m.Front) {
		return errors.New("front: the digest is not 64 lowercase hex digits")
	}
	for c, d := range m.Classes {
		switch {
		case !address.ValidIdent(c):
			return fmt.Errorf("class %q: a class name must match [a-z][a-z0-9-]{0,63}", c)
		case !digestRE.MatchString(d):
			return fmt.Errorf("class %s: the digest is not 64 lowercase hex digits", c)
		}
	}
	for c, a := range m.Access {
		if err := m.has(c, "access"); err != nil {
			return err
		}
		if a.Mode == access.Open {
			return fmt.Errorf("access %s: open is written as no access line", c)
		}
	}
	for c, d := range m.Config {
		if err := m.has(c, "config"); err != nil {
			return err
		}
		if !digestRE.MatchString(d) {
			return fmt.Errorf("config %s: the digest is not 64 lowercase hex digits", c)
		}
	}
	for c, names := range m.Requires {
		if err := m.has(c, "requires"); err != nil {
			return err
		}
		if len(names) == 0 || !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			return fmt.Errorf("requires %s: the names must be given, sorted and once each", c)
		}
		for _, n := range names {
			if !envfile.ValidName(n) {
				return fmt.Errorf("requires %s: %q is not a configuration name (letters, digits and _)", c, n)
			}
		}
	}
	for c, d := range m.Expire {
		if err := m.has(c, "expire"); err != nil {
			return err
		}
		if d < MinIdle || d%time.Second != 0 {
			return fmt.Errorf("expire %s: %v is not whole seconds of at least %v", c, d, MinIdle)
		}
	}
	return nil
}

func (m Manifest) has(class, what string) error {
	if _, ok := m.Classes[class]; !ok {
		return fmt.Errorf("%s for class %q, which the version does not have", what, class)
	}
	return nil
}

// ParseManifest reads a manifest stored under key. Every line must be one
// it knows, in canonical form; an error names key and the line number
// (a manifest holds no value, but the rule is the .config one).
func ParseManifest(key string, b []byte) (Manifest, error) {
	m := Manifest{Classes: map[string]string{}, Access: map[string]access.Access{}, Config: map[string]string{}, Requires: map[string][]string{},
		Expire: map[string]time.Duration{}}
	text, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return m, fmt.Errorf("%s: does not end with a newline (cut short?)", key)
	}
	lines := strings.Split(text, "\n")
	if lines[0] != manifestHeader {
		return m, fmt.Errorf("%s line 1: not %q (a manifest of another format or not a manifest)", key, manifestHeader)
	}
	for i, line := range lines[1:] {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s line %d: %s", key, i+2, fmt.Sprintf(format, args...))
		}
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "previous", "front":
			if strings.Contains(rest, " ") || rest == "" {
				return m, bad("want %s and one value", word)
			}
			p := map[string]*string{"previous": &m.Previous, "front": &m.Front}[word]
			if *p != "" {
				return m, bad("a second %s line", word)
			}
			*p = rest
		case "class", "access", "config", "requires", "expire":
			class, value, ok := strings.Cut(rest, " ")
			if !ok || class == "" || value == "" {
				return m, bad("want %s CLASS VALUE", word)
			}
			var dup bool
			switch word {
			case "class":
				_, dup = m.Classes[class]
				m.Classes[class] = value
			case "access":
				a, err := access.Parse(value)
				if err != nil || a.String() != value {
					return m, bad("access %s: not a rule in canonical form (existing, existing:NAME,... sorted, or internal)", class)
				}
				_, dup = m.Access[class]
				m.Access[class] = a
			case "config":
				_, dup = m.Config[class]
				m.Config[class] = value
			case "requires":
				_, dup = m.Requires[class]
				m.Requires[class] = strings.Split(value, ",")
			case "expire":
				secs, err := strconv.ParseUint(value, 10, 32)
				if err != nil || strconv.FormatUint(secs, 10) != value {
					return m, bad("expire %s: not a number of seconds", class)
				}
				_, dup = m.Expire[class]
				m.Expire[class] = time.Duration(secs) * time.Second
			}
			if dup {
				return m, bad("a second %s line for class %s", word, class)
			}
		default:
			return m, bad("unknown line (starting %q)", word)
		}
	}
	if err := m.Check(); err != nil {
		return m, fmt.Errorf("%s: %w", key, err)
	}
	return m, nil
}

// Current is what current holds: the version nodes run and the seq it
// became current under, which only grows.
type Current struct {
	Version string
	Seq     uint64
}

func (c Current) String() string { return c.Version + " " + strconv.FormatUint(c.Seq, 10) }

func (c Current) format() []byte { return []byte(c.String() + "\n") }

// ParseCurrent reads current, stored under key.
func ParseCurrent(key string, b []byte) (Current, error) {
	text, ok := strings.CutSuffix(string(b), "\n")
	v, s, two := strings.Cut(text, " ")
	seq, err := strconv.ParseUint(s, 10, 64)
	if !ok || !two || !versionRE.MatchString(v) || err != nil || seq == 0 || strconv.FormatUint(seq, 10) != s {
		return Current{}, fmt.Errorf("%s: not \"<version> <seq>\\n\" (16 hex digits, a seq from 1)", key)
	}
	return Current{Version: v, Seq: seq}, nil
}
