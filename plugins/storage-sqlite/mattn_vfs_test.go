//go:build cgo

package sqlitestorage

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMattnPathAsGiven: a mattn connection takes an absolute path as it is
// given, a link on the way unresolved (SQLite's unix VFS resolves each
// component, an lstat each), and writes its log beside that name, which is
// beside the file; a relative path is still made absolute. It fails on
// SQLite's own unix-none, which names the file by the link's target.
func TestMattnPathAsGiven(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	opened := func(path string) string {
		t.Helper()
		c, err := mattn{}.open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		for _, sql := range []string{"PRAGMA locking_mode=EXCLUSIVE", "PRAGMA journal_mode=WAL", "CREATE TABLE t (x)"} {
			if _, err := pragmaOn(c, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if _, err := os.Stat(filepath.Join(target, filepath.Base(path)+"-wal")); err != nil {
			t.Errorf("the log is not beside the database: %v", err)
		}
		file, err := pragmaOn(c, "SELECT file FROM pragma_database_list WHERE name = 'main'")
		if err != nil {
			t.Fatal(err)
		}
		return string(file.Bytes)
	}
	if got, want := opened(filepath.Join(link, "db")), filepath.Join(link, "db"); got != want {
		t.Errorf("the connection names its file %s, want %s, the path it was given", got, want)
	}
	t.Chdir(dir)
	if got, want := opened(filepath.Join("link", "rel")), filepath.Join(target, "rel"); got != want {
		t.Errorf("a relative path: the connection names its file %s, want %s", got, want)
	}
}
