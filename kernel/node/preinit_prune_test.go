package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
)

// A start removes the kept snapshots no start used for a week, and keeps
// the others.
func TestRemoveStaleSnapshots(t *testing.T) {
	n := &Node{opts: Options{CacheDir: t.TempDir()}}
	old, fresh := n.preinitPath("old"), n.preinitPath("fresh")
	os.MkdirAll(filepath.Dir(old), 0o700)
	for _, path := range []string{old, fresh} {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	week := time.Now().Add(-cacheprune.Unused - time.Hour)
	if err := os.Chtimes(old, week, week); err != nil {
		t.Fatal(err)
	}
	n.removeStaleSnapshots()
	if _, err := os.Stat(old); err == nil {
		t.Error("the stale snapshot is still there")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh snapshot was removed: %v", err)
	}
}
