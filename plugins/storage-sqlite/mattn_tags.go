package sqlitestorage

import (
	"fmt"

	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// mattnRemedy names the go-sqlite3 build tag that compiles a capability in
// (its default build has fts3, fts4 and rtree but not fts5, the math
// functions or stat4).
func mattnRemedy(capability string) string {
	tag := map[string]string{storage.CapFTS5: "sqlite_fts5", storage.CapMath: "sqlite_math_functions", storage.CapStat4: "sqlite_stat4"}[capability]
	if tag == "" {
		return ""
	}
	return fmt.Sprintf("go-sqlite3 compiles %s in only with its build tag %s: CGO_ENABLED=1 go build -tags %s ./cmd/wasmkeep", capability, tag, tag)
}
