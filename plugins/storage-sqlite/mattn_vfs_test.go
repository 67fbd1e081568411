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
// beside the file; a database file that is a link, and a relative path,
// are resolved as SQLite does (it opens files with O_NOFOLLOW). It fails
// on SQLite's own unix-none, which names the file by the link's target.
func TestMattnPathAsGiven(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	opened := func(path, targetName string) string {
		t.Helper()
		c, err := mattn{}.open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		for _, sql := range []string{"PRAGMA locking_mode=EXCLUSIVE", "PRAGMA journal_mode=WAL", "CREATE TABLE IF NOT EXISTS t (x)", "INSERT INTO t VALUES (1)"} {
			if _, err := pragmaOn(c, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if _, err := os.Stat(filepath.Join(target, targetName+"-wal")); err != nil {
			t.Errorf("the log is not beside the database: %v", err)
		}
		file, err := pragmaOn(c, "SELECT file FROM pragma_database_list WHERE name = 'main'")
		if err != nil {
			t.Fatal(err)
		}
		return string(file.Bytes)
	}
	if got, want := opened(filepath.Join(link, "db"), "db"), filepath.Join(link, "db"); got != want {
		t.Errorf("the connection names its file %s, want %s, the path it was given", got, want)
	}
	if err := os.Symlink(filepath.Join(target, "db"), filepath.Join(target, "linked.db")); err != nil {
		t.Fatal(err)
	}
	if got, want := opened(filepath.Join(link, "linked.db"), "db"), filepath.Join(target, "db"); got != want {
		t.Errorf("a database file that is a link: the connection names its file %s, want %s", got, want)
	}
	t.Chdir(dir)
	if got, want := opened(filepath.Join("link", "rel"), "rel"), filepath.Join(target, "rel"); got != want {
		t.Errorf("a relative path: the connection names its file %s, want %s", got, want)
	}
}
