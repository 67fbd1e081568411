package localfs

import (
	"os"
	"path/filepath"
	"testing"
)

// A file under the test's temporary folder (a disk or tmpfs here) is
// local; /proc's are not on a file system Holds knows.
func TestHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		local bool
	}{{path, true}, {"/proc/self/status", false}} {
		f, err := os.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := Holds(f); got != c.local {
			t.Errorf("Holds(%s) = %v, want %v", c.path, got, c.local)
		}
		f.Close()
	}
}
