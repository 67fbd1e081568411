package sqlitestorage

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Capabilities (storage.Cap*) are the parts of guest-visible SQL that depend
// on how a binding's SQLite was compiled: modernc.org/sqlite and go-sqlite3 compile
// the same SQLite 3.54 with different options, and go-sqlite3's further
// depend on build tags. Each is probed from the SQLite the binary links
// (module, function and compile-option lists), not listed by hand, so a
// build tag cannot make the list lie. Only what the sandbox lets guests use
// is listed (geopoly, dbstat and sqlite_dbpage are refused anyway).
//
// requiredCaps are what every driver must offer: storage/v2 guests may use
// full-text search and r-trees (conformance/storagetest checks both), so a
// build without them is refused rather than failing a guest later.
var requiredCaps = []string{storage.CapFTS5, storage.CapRTree}

// remedier is a binding whose capabilities depend on how the binary was
// built; remedy says how to get one it lacks ("" if there is no way).
type remedier interface {
	remedy(capability string) string
}

var (
	capsMu    sync.Mutex
	capsCache = map[string][]string{} // by driver name
)

// capabilitiesOf probes, once per driver, what b's SQLite offers.
func capabilitiesOf(name string, b binding) ([]string, error) {
	capsMu.Lock()
	defer capsMu.Unlock()
	if caps, ok := capsCache[name]; ok {
		return caps, nil
	}
	caps, err := probe(b)
	if err != nil {
		return nil, fmt.Errorf("probing driver %q's SQLite: %w", name, err)
	}
	capsCache[name] = caps
	return caps, nil
}

func probe(b binding) ([]string, error) {
	c, err := b.open(":memory:")
	if err != nil {
		return nil, err
	}
	defer c.close()
	list := func(sql string) (map[string]bool, error) {
		s, _, err := c.prepare(sql)
		if err != nil {
			return nil, err
		}
		defer s.finalize()
		m := map[string]bool{}
		for {
			row, err := s.step()
			if err != nil {
				return nil, err
			}
			if !row {
				return m, nil
			}
			m[strings.ToLower(string(s.column(0).Bytes))] = true
		}
	}
	modules, err := list("SELECT name FROM pragma_module_list")
	if err != nil {
		return nil, err
	}
	funcs, err := list("SELECT name FROM pragma_function_list")
	if err != nil {
		return nil, err
	}
	opts, err := list("SELECT compile_options FROM pragma_compile_options")
	if err != nil {
		return nil, err
	}
	var caps []string
	for _, m := range []string{storage.CapFTS3, storage.CapFTS4, storage.CapFTS5, storage.CapRTree} {
		if modules[m] {
			caps = append(caps, m)
		}
	}
	for f, cap := range map[string]string{"sqrt": storage.CapMath, "soundex": storage.CapSoundex, "sqlite_offset": storage.CapOffset} {
		if funcs[f] {
			caps = append(caps, cap)
		}
	}
	// The parser decides, not the compile option: SQLite's amalgamation
	// ships a parser generated without ORDER BY and LIMIT on UPDATE and
	// DELETE, so go-sqlite3's SQLITE_ENABLE_UPDATE_DELETE_LIMIT has no
	// effect.
	s, _, err := c.prepare("CREATE TABLE probe(a)")
	if err != nil {
		return nil, err
	}
	_, err = s.step()
	s.finalize()
	if err != nil {
		return nil, err
	}
	if s, _, err := c.prepare("DELETE FROM probe ORDER BY a LIMIT 1"); err == nil {
		s.finalize()
		caps = append(caps, storage.CapUpdateDeleteLimit)
	}
	if opts["enable_stat4"] {
		caps = append(caps, storage.CapStat4)
	}
	if !opts["like_doesnt_match_blobs"] {
		caps = append(caps, storage.CapLikeBlobs)
	}
	slices.Sort(caps)
	return caps, nil
}

// checkRequired refuses a driver that lacks a required capability, saying
// how to get it where the binding knows.
func checkRequired(name string, b binding, caps []string) error {
	var lack, how []string
	for _, c := range requiredCaps {
		if slices.Contains(caps, c) {
			continue
		}
		lack = append(lack, c)
		if r, ok := b.(remedier); ok {
			if h := r.remedy(c); h != "" && !slices.Contains(how, h) {
				how = append(how, h)
			}
		}
	}
	if len(lack) == 0 {
		return nil
	}
	msg := fmt.Sprintf("driver %q's SQLite lacks %s, which storage/v2 guests may use", name, strings.Join(lack, " and "))
	if len(how) > 0 {
		msg += "; " + strings.Join(how, "; ")
	}
	return &lackError{driver: name, lack: lack, msg: msg}
}

// lackError refuses a driver whose SQLite lacks required capabilities.
type lackError struct {
	driver string
	lack   []string
	msg    string
}

func (e *lackError) Error() string { return e.msg }
