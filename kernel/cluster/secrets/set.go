package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/envfile"
)

// MaxPlaintext bounds a set's plaintext, as a configuration file is
// bounded: every node holds it in memory.
const MaxPlaintext = envfile.MaxSize

// Set is an app's secrets: per class, names and their values. Printed, it
// shows names only; values leave it only through Value and Values.
type Set struct {
	classes map[string]map[string]string
}

// Name is one secret's place in a set.
type Name struct{ Class, Name string }

func (n Name) String() string { return n.Class + " " + n.Name }

// Put sets class's name to value, checking the class and name (never
// quoting the value). It does not check the set's size: Plaintext does.
func (s *Set) Put(class, name, value string) error {
	if err := checkEntry(class, name, value); err != nil {
		if address.ValidIdent(class) && envfile.ValidName(name) {
			return fmt.Errorf("%s %s: %w", class, name, err)
		}
		return err
	}
	s.set(class, name, value)
	return nil
}

// set sets class's name to value, checked.
func (s *Set) set(class, name, value string) {
	if s.classes == nil {
		s.classes = map[string]map[string]string{}
	}
	if s.classes[class] == nil {
		s.classes[class] = map[string]string{}
	}
	s.classes[class][name] = value
}

// Delete removes class's name and reports whether it was set.
func (s *Set) Delete(class, name string) bool {
	vars, ok := s.classes[class]
	if _, set := vars[name]; !ok || !set {
		return false
	}
	delete(vars, name)
	if len(vars) == 0 {
		delete(s.classes, class)
	}
	return true
}

// Value is class's value for name.
func (s Set) Value(class, name string) (string, bool) {
	v, ok := s.classes[class][name]
	return v, ok
}

// Values is a copy of class's names and values (nil for a class with none).
func (s Set) Values(class string) map[string]string { return maps.Clone(s.classes[class]) }

// Names lists the set's names, sorted by class then name.
func (s Set) Names() []Name {
	var out []Name
	for _, c := range slices.Sorted(maps.Keys(s.classes)) {
		for _, n := range slices.Sorted(maps.Keys(s.classes[c])) {
			out = append(out, Name{c, n})
		}
	}
	return out
}

// Len is how many names the set holds.
func (s Set) Len() int { return len(s.Names()) }

// Clone is a deep copy.
func (s Set) Clone() Set {
	var c Set
	for _, n := range s.Names() {
		c.Put(n.Class, n.Name, s.classes[n.Class][n.Name])
	}
	return c
}

// String and GoString show names only, so a set printed by mistake leaks
// no value.
func (s Set) String() string {
	var names []string
	for _, n := range s.Names() {
		names = append(names, n.Class+"."+n.Name)
	}
	return "secrets[" + strings.Join(names, " ") + "]"
}

func (s Set) GoString() string { return s.String() }

func checkEntry(class, name, value string) error {
	switch {
	// An invalid class or name is not quoted: a value given in its place
	// by mistake must not be echoed.
	case !address.ValidIdent(class):
		return errors.New("a class name must match [a-z][a-z0-9-]{0,63} (the one given is not repeated here, in case it was a value)")
	case !envfile.ValidName(name):
		return errors.New("a name is letters, digits and _ (the one given is not repeated here, in case it was a value)")
	case !utf8.ValidString(value):
		return errors.New("the value is not UTF-8")
	}
	return nil
}

// Plaintext is the set in the plaintext format (the book's ADR 0016), the
// entries sorted: "<class> <name> <length>\n<value bytes>\n" each. A
// value is any UTF-8, newlines included. A set over MaxPlaintext is
// refused, naming its size.
func (s Set) Plaintext() ([]byte, error) {
	var buf bytes.Buffer
	for _, n := range s.Names() {
		v := s.classes[n.Class][n.Name]
		fmt.Fprintf(&buf, "%s %s %d\n%s\n", n.Class, n.Name, len(v), v)
	}
	if buf.Len() > MaxPlaintext {
		return nil, fmt.Errorf("the secrets are %d bytes in all, over the %d a set may hold", buf.Len(), MaxPlaintext)
	}
	return buf.Bytes(), nil
}

// ParsePlaintext reads the plaintext format, strictly: a name given twice
// is refused. Errors name source and the entry's number, never a value,
// nor a class or name, which a wrong length before may have cut from
// inside a value.
func ParsePlaintext(source string, data []byte) (Set, error) {
	var s Set
	if len(data) > MaxPlaintext {
		return s, fmt.Errorf("%s: %d bytes, over the %d a set may hold", source, len(data), MaxPlaintext)
	}
	for i := 1; len(data) > 0; i++ {
		head, rest, ok := bytes.Cut(data, []byte("\n"))
		fields := strings.Split(string(head), " ")
		if !ok || len(fields) != 3 {
			return Set{}, fmt.Errorf("%s: entry %d: its first line is not \"<class> <name> <length>\"", source, i)
		}
		class, name := fields[0], fields[1]
		where := fmt.Sprintf("%s: entry %d", source, i)
		if err := checkEntry(class, name, ""); err != nil {
			return Set{}, fmt.Errorf("%s: %w", where, err)
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil || n < 0 || strconv.Itoa(n) != fields[2] {
			return Set{}, fmt.Errorf("%s: the length is not a decimal number", where)
		}
		if n >= len(rest) || rest[n] != '\n' {
			return Set{}, fmt.Errorf("%s: the value is not %d bytes followed by a newline", where, n)
		}
		if _, dup := s.Value(class, name); dup {
			return Set{}, fmt.Errorf("%s: given twice", where)
		}
		if err := checkEntry(class, name, string(rest[:n])); err != nil {
			return Set{}, fmt.Errorf("%s: %w", where, err)
		}
		s.set(class, name, string(rest[:n]))
		data = rest[n+1:]
	}
	return s, nil
}
