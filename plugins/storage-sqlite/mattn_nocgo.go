//go:build !cgo

package sqlitestorage

import "errors"

// Without cgo there is no go-sqlite3; choosing it says how to get a build
// that has it.
func init() { missing["mattn"] = errNoCgo }

var errNoCgo = errors.New(`driver "mattn" (github.com/mattn/go-sqlite3) needs cgo, and this binary was built without it (CGO_ENABLED=0); build with a C compiler, cgo and go-sqlite3's FTS5: CGO_ENABLED=1 go build -tags sqlite_fts5 ./cmd/wasmkeep; or use driver "modernc"`)
