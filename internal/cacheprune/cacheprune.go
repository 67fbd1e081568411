// Package cacheprune bounds the machine's compile cache (ADR 1058): what no
// start has used for Unused is removed at a later start. A start that uses a
// file marks it by its modification time (Touch); writing one marks it too.
//
// The cache is shared by the nodes of a machine, so every removal may fail
// (another user's file) or race another node's: failures are ignored, and a
// missing file only costs a compile.
package cacheprune

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Unused is how long a file stays unused before a start removes it: a
// deploy or an upgrade leaves the code of the builds it replaces, but a
// node may be started on an older one again.
const Unused = 7 * 24 * time.Hour

// Touch marks path as used at now.
func Touch(path string, now time.Time) {
	os.Chtimes(path, now, now) // unmarked, it is compiled again a week on
}

// RemoveStale removes the files under dir (at any depth) unused for Unused
// at now, temporaries a write left behind included. It leaves folders, into
// which a running engine may be writing.
func RemoveStale(dir string, now time.Time) {
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && stale(d, now) {
			os.Remove(path)
		}
		return nil // an unreadable folder is skipped
	})
}

// Prune removes, from the folders of root whose name starts with prefix
// (one engine's, one per version or build of it), what is unused for Unused
// at now: a whole folder if nothing in it was used since, else its stale
// files. current, this build's folder, is never removed whole: an engine
// writes into it, and only its files go.
func Prune(root, prefix, current string, now time.Time) {
	entries, _ := os.ReadDir(root) // none yet: nothing to remove
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if dir != filepath.Clean(current) && unusedTree(dir, now) {
			os.RemoveAll(dir)
			continue
		}
		RemoveStale(dir, now)
	}
}

// unusedTree reports whether dir and everything under it are stale.
func unusedTree(dir string, now time.Time) bool {
	unused := true
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !stale(d, now) {
			unused = false
			return filepath.SkipAll
		}
		return nil
	})
	return unused
}

func stale(d os.DirEntry, now time.Time) bool {
	info, err := d.Info()
	return err == nil && now.Sub(info.ModTime()) > Unused
}
