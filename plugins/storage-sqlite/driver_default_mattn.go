//go:build cgo && sqlite_fts5

package sqlitestorage

// defaultDriver is mattn where the build has it whole (cgo, and FTS5, which
// go-sqlite3 compiles in only with its tag): glibc's malloc packs a
// connection's memory tighter than modernc's allocator and C runs SQL
// faster than transpiled Go (ADR 1064). TestDefaultDriver checks that this
// file's build constraint matches what the build can run.
const defaultDriver = "mattn"
