package sqlitestorage

import (
	"fmt"
	"strings"
)

// The guest sandbox, enforced by SQLite's authorizer while a guest statement
// is compiled (and while it runs, for what SQLite compiles on its behalf:
// virtual tables, table-valued pragmas, VACUUM).

// hostPrefix starts the names of host tables (the alarm, ...), which guests
// can neither read nor change. SQLite compares names case-insensitively, and
// so does isHostTable.
const hostPrefix = "_wasmkeep_"

func isHostTable(name string) bool {
	return len(name) >= len(hostPrefix) && strings.EqualFold(name[:len(hostPrefix)], hostPrefix)
}

// txKind is the transaction control a statement does, as the authorizer
// reports it.
type txKind uint8

const (
	txNone       txKind = iota
	txBegin             // BEGIN
	txCommit            // COMMIT or END
	txRollback          // ROLLBACK
	txSavepoint         // SAVEPOINT
	txRelease           // RELEASE
	txRollbackTo        // ROLLBACK TO
)

// txKindOf maps the authorizer's arguments for transaction and savepoint
// operations to a txKind.
func txKindOf(action int, op string) txKind {
	switch {
	case action == authTransaction && op == "BEGIN":
		return txBegin
	case action == authTransaction && op == "COMMIT":
		return txCommit
	case action == authTransaction && op == "ROLLBACK":
		return txRollback
	case action == authSavepoint && op == "BEGIN":
		return txSavepoint
	case action == authSavepoint && op == "RELEASE":
		return txRelease
	case action == authSavepoint && op == "ROLLBACK":
		return txRollbackTo
	}
	return txNone
}

// virtualModules are the virtual table modules a guest may create (fts3 and
// fts4 only where the SQLite build has them).
var virtualModules = map[string]bool{"fts3": true, "fts4": true, "fts5": true, "rtree": true}

// rawTables read or write the database file's pages directly, host tables
// included.
var rawTables = map[string]bool{"sqlite_dbpage": true, "dbstat": true}

// blockedFunctions load code into the process or hand out raw pointers.
var blockedFunctions = map[string]bool{"load_extension": true, "fts3_tokenizer": true}

type pragmaUse uint8

const (
	pragmaRead  pragmaUse = iota // read only, no argument
	pragmaSet                    // read, or set to a value
	pragmaTable                  // read only; the argument, if any, is a table or index name (or a count)
)

// guestPragmas is the allow-list. A pragma that changes the journal, the
// syncing, the cache, the file or the connection's limits is missing on
// purpose: the host owns those. Those a guest may set touch only its own
// data (user_version, the foreign-key checks it asks for).
var guestPragmas = map[string]pragmaUse{
	"user_version":       pragmaSet,
	"foreign_keys":       pragmaSet,
	"defer_foreign_keys": pragmaSet,
	"recursive_triggers": pragmaSet,

	"application_id":  pragmaRead,
	"collation_list":  pragmaRead,
	"compile_options": pragmaRead,
	"data_version":    pragmaRead,
	"encoding":        pragmaRead,
	"freelist_count":  pragmaRead,
	"function_list":   pragmaRead,
	"max_page_count":  pragmaRead,
	"module_list":     pragmaRead,
	"page_count":      pragmaRead,
	"page_size":       pragmaRead,
	"pragma_list":     pragmaRead,
	"schema_version":  pragmaRead,

	"foreign_key_check": pragmaTable,
	"foreign_key_list":  pragmaTable,
	"index_info":        pragmaTable,
	"index_list":        pragmaTable,
	"index_xinfo":       pragmaTable,
	"integrity_check":   pragmaTable,
	"quick_check":       pragmaTable,
	"table_info":        pragmaTable,
	"table_list":        pragmaTable,
	"table_xinfo":       pragmaTable,
}

const tempRefusal = "TEMP tables, views, triggers and indexes are not allowed (they would escape the database's size limit)"

// guestRefusal says why a guest statement may not do the operation the
// authorizer reports, or "" if it may.
func guestRefusal(action int, arg1, arg2, dbName string) string {
	switch action {
	case authSelect, authTransaction, authSavepoint, authRecursive, authAnalyze:
		return ""
	case authAttach, authDetach:
		return "ATTACH, DETACH and VACUUM are not allowed"
	case authCreateTempIndex, authCreateTempTable, authCreateTempTrigger, authCreateTempView,
		authDropTempIndex, authDropTempTable, authDropTempTrigger, authDropTempView:
		return tempRefusal
	case authPragma:
		return pragmaRefusal(arg1, arg2)
	case authFunction:
		if blockedFunctions[strings.ToLower(arg2)] {
			return fmt.Sprintf("function %s is not allowed", arg2)
		}
		return ""
	case authCreateVTable:
		switch {
		case dbName == "temp":
			return tempRefusal
		case !virtualModules[strings.ToLower(arg2)]:
			return fmt.Sprintf("virtual table module %q is not allowed (fts3, fts4, fts5 and rtree are)", arg2)
		}
		return hostRefusal(arg1)
	case authRead, authInsert, authUpdate, authDelete:
		if rawTables[strings.ToLower(arg1)] {
			return fmt.Sprintf("table %s is not allowed (it reaches the database file's pages)", arg1)
		}
		return hostRefusal(arg1)
	case authCreateIndex, authCreateTable, authCreateTrigger, authCreateView,
		authDropIndex, authDropTable, authDropTrigger, authDropView, authDropVTable, authReindex:
		if dbName == "temp" { // CREATE TABLE temp.x is not a "TEMP" operation
			return tempRefusal
		}
		if r := hostRefusal(arg1); r != "" {
			return r
		}
		return hostRefusal(arg2)
	case authAlterTable:
		return hostRefusal(arg2) // arg1 is the schema name
	}
	return fmt.Sprintf("SQLite operation %d is not allowed", action)
}

func hostRefusal(name string) string {
	if isHostTable(name) {
		return fmt.Sprintf("%s is reserved for the host (names starting with %s)", name, hostPrefix)
	}
	return ""
}

func pragmaRefusal(name, arg string) string {
	use, ok := guestPragmas[strings.ToLower(name)]
	switch {
	case !ok:
		return fmt.Sprintf("PRAGMA %s is not allowed", name)
	case use == pragmaRead && arg != "":
		return fmt.Sprintf("PRAGMA %s may be read but not set", name)
	case use == pragmaTable:
		return hostRefusal(arg)
	}
	return ""
}

// mentionsHost reports whether SQL text names a host table anywhere. Schema
// statements need it: the authorizer hears neither the new name of ALTER
// TABLE ... RENAME TO nor the table a REFERENCES clause names (a foreign key
// to a host table would let a guest probe its rows). Matching the bare text
// refuses a few harmless statements (a string that happens to contain the
// prefix) rather than parse SQL a second way.
func mentionsHost(sql string) bool {
	return strings.Contains(strings.ToLower(sql), hostPrefix)
}

// blank reports whether s holds only whitespace, comments and semicolons:
// what may follow the one statement of a call.
func blank(s string) bool {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ';' || c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r':
			i++
		case strings.HasPrefix(s[i:], "--"):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				return true
			}
			i += end + 1
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return true // SQLite ends an unterminated comment at the end of the text
			}
			i += 2 + end + 2
		default:
			return false
		}
	}
	return true
}
