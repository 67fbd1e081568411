// Package envfile reads a class's configuration file (--env), in the format
// systemd's EnvironmentFile= reads, without ever putting a line's text (it
// may hold a secret) in an error.
package envfile

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// MaxSize is the most a configuration file (and a deployed .config) may
// hold: configuration is names and short values, and nodes read it whole.
const MaxSize = 1 << 20

// Parse reads a class's configuration (--env) in the format systemd's
// EnvironmentFile= reads: NAME=value per line; blank lines and lines starting
// with # or ; are skipped; an optional "export " prefix; one pair of single or
// double quotes around the value removed; nothing inside interpreted (no
// escapes, no $VAR); a name set twice keeps the later value. Names are
// letters, digits and _; values hold no control character other than tab.
//
// Values may be secrets: an error names the file and line, never the line's
// text. worldReadable reports a file anyone on the machine can read, for the
// caller to warn about. A file over MaxSize is refused.
func Parse(path string) (vars map[string]string, worldReadable bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, false, err
	}
	if len(b) > MaxSize {
		return nil, false, fmt.Errorf("%s: over %d bytes (configuration is names and short values)", path, MaxSize)
	}
	vars, err = ParseBytes(path, b)
	if err != nil {
		return nil, false, err
	}
	return vars, info.Mode().Perm()&0o004 != 0, nil
}

// ParseBytes reads configuration as Parse does from b, which came from
// source (a file or a bucket object): errors name source and the line.
func ParseBytes(source string, b []byte) (map[string]string, error) {
	vars := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		name, value, reason := parseEnvLine(strings.TrimSuffix(line, "\r"))
		if reason != "" {
			return nil, fmt.Errorf("%s:%d: %s", source, i+1, reason)
		}
		if name != "" {
			vars[name] = value
		}
	}
	return vars, nil
}

// Format writes vars as ParseBytes reads them back unchanged: one
// NAME='value' line per name, sorted, so the same values always make the
// same bytes (a deployed .config object is content-addressed). vars must
// be what Parse gave: a value holding both quotes was read unquoted, so
// it is written unquoted.
func Format(vars map[string]string) []byte {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		v := vars[name]
		q := "'"
		switch {
		case !strings.Contains(v, "'"):
		case !strings.Contains(v, `"`):
			q = `"`
		default:
			q = ""
		}
		b.WriteString(name + "=" + q + v + q + "\n")
	}
	return []byte(b.String())
}

// parseEnvLine returns the line's name and value, an empty name for a line
// that sets nothing, or why the line is malformed (without its text).
func parseEnvLine(line string) (name, value, reason string) {
	s := strings.TrimLeft(line, " \t")
	if s == "" || s[0] == '#' || s[0] == ';' {
		return "", "", ""
	}
	if rest, ok := strings.CutPrefix(s, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
		s = strings.TrimLeft(rest, " \t")
	}
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", "not NAME=value"
	}
	name = strings.TrimRight(name, " \t")
	if !ValidName(name) {
		return "", "", "a name is letters, digits and _"
	}
	value = strings.Trim(value, " \t")
	if value != "" && (value[0] == '"' || value[0] == '\'') {
		end := strings.IndexByte(value[1:], value[0]) + 1
		switch {
		case end == 0:
			return "", "", "unterminated quote"
		case end != len(value)-1:
			return "", "", "text after the closing quote"
		}
		value = value[1:end]
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", "a control character in the value"
		}
	}
	return name, value, ""
}

// ValidName reports whether s is a configuration name: letters, digits
// and _.
func ValidName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
