//go:build !(cgo && sqlite_fts5)

package sqlitestorage

// defaultDriver is modernc, pure Go, in a build that lacks mattn or its FTS5
// (driver_default_mattn.go).
const defaultDriver = "modernc"
