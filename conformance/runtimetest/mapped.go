package runtimetest

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// CodeMappedFrom reports whether this process maps executable pages from a
// file under dir (Linux's /proc/self/maps; elsewhere it skips t). An
// engine's tests check with it that code loaded from its compile cache is
// the file's pages rather than a copy; it is no rule of the contract.
func CodeMappedFrom(t testing.TB, dir string) bool {
	t.Helper()
	if goruntime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // the kernel names files by their real paths
	}
	dir = filepath.Clean(dir) + string(filepath.Separator)
	for line := range strings.Lines(string(maps)) {
		// address perms offset dev inode path
		fields := strings.Fields(line)
		if len(fields) >= 6 && strings.Contains(fields[1], "x") && strings.HasPrefix(fields[5], dir) {
			return true
		}
	}
	return false
}
