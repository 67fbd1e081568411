package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, s := range []string{"first", "second, longer"} {
		if err := Write(path, []byte(s)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != s {
			t.Fatalf("read %q, %v; want %q", b, err, s)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%d entries in the directory, want only the file", len(es))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}
