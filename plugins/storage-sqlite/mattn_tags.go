package sqlitestorage

import "fmt"

// mattnRemedy names the go-sqlite3 build tag that compiles a capability in
// (its default build has fts3, fts4 and rtree but not fts5, the math
// functions or stat4).
func mattnRemedy(capability string) string {
	tag := map[string]string{capFTS5: "sqlite_fts5", capMath: "sqlite_math_functions", capStat4: "sqlite_stat4"}[capability]
	if tag == "" {
		return ""
	}
	return fmt.Sprintf("go-sqlite3 compiles %s in only with its build tag %s: CGO_ENABLED=1 go build -tags %s ./cmd/wasmkeep", capability, tag, tag)
}
