// Package access owns a class's access rule (book ADR 0010): which outside
// requests reach the class's actors (open, existing, existing with names
// an outside request may still create, internal), how --access and
// node.access write one, and whether a request may create an actor.
package access

import (
	"fmt"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/node/address"
)

// Mode says which outside requests reach a class's actors (book ADR 0010).
type Mode int

const (
	// Open lets any outside request create an actor by naming it.
	Open Mode = iota
	// Existing lets outside requests reach only actors that exist.
	Existing
	// Internal refuses outside requests: only actors and alarms reach the class.
	Internal
)

// Access is a class's access rule. The zero value is open.
type Access struct {
	Mode Mode
	// Create lists, under Existing, the names an outside request may still
	// create (a class's well-known actors), sorted and without duplicates.
	Create []string
}

const validAccess = "open, existing, existing:NAME,... or internal"

// Parse reads a mode as --access and node.access write it: open,
// existing, existing:NAME,NAME or internal.
func Parse(s string) (Access, error) {
	switch s {
	case "open":
		return Access{Mode: Open}, nil
	case "existing":
		return Access{Mode: Existing}, nil
	case "internal":
		return Access{Mode: Internal}, nil
	}
	list, ok := strings.CutPrefix(s, "existing:")
	if !ok {
		return Access{}, fmt.Errorf("unknown access mode %q (valid: %s)", s, validAccess)
	}
	names := strings.Split(list, ",")
	for _, name := range names {
		if err := address.CheckName(name); err != nil {
			return Access{}, fmt.Errorf("access mode %q: %w", s, err)
		}
	}
	slices.Sort(names)
	return Access{Mode: Existing, Create: slices.Compact(names)}, nil
}

// String writes the rule as Parse reads it.
func (a Access) String() string {
	switch {
	case a.Mode == Internal:
		return "internal"
	case a.Mode == Existing && len(a.Create) > 0:
		return "existing:" + strings.Join(a.Create, ",")
	case a.Mode == Existing:
		return "existing"
	}
	return "open"
}

// Equal reports whether a and b are the same rule.
func (a Access) Equal(b Access) bool { return a.Mode == b.Mode && slices.Equal(a.Create, b.Create) }

// AllowsCreate reports whether an outside request may create name.
func (a Access) AllowsCreate(name string) bool {
	return a.Mode == Open || a.Mode == Existing && slices.Contains(a.Create, name)
}
