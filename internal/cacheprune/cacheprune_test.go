package cacheprune

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// file makes path, and its folders under root, last used age before now.
func file(t *testing.T, root, path string, now time.Time, age time.Duration) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("code"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := now.Add(-age)
	for p := path; p != root; p = filepath.Dir(p) {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Old files go, from this build's folder too; a folder of another build
// goes whole once nothing in it was used for a week, and stays (less its
// stale files) while something was; other engines' files stay.
func TestPrune(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	old, fresh := Unused+time.Hour, Unused-time.Hour
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	file(t, root, j("eng-v2", "old"), now, old)
	file(t, root, j("eng-v2", "sub", "old"), now, old)
	file(t, root, j("eng-v2", "fresh"), now, fresh)
	file(t, root, j("eng-v1", "sub", "old"), now, old)
	file(t, root, j("eng-v0", "old"), now, old)
	file(t, root, j("eng-v0", "sub", "fresh"), now, fresh)
	file(t, root, j("other", "old"), now, old)
	file(t, root, j("eng-v3", "old"), now, old) // all stale, but current

	Prune(root, "eng-", j("eng-v3"), now)

	for path, want := range map[string]bool{
		j("eng-v2", "old"):          false,
		j("eng-v2", "sub", "old"):   false,
		j("eng-v2", "fresh"):        true,
		j("eng-v1"):                 false, // nothing used: the whole folder
		j("eng-v0", "old"):          false,
		j("eng-v0", "sub", "fresh"): true,
		j("other", "old"):           true, // not this engine's
		j("eng-v3"):                 true, // this build's: kept, emptied
		j("eng-v3", "old"):          false,
	} {
		if exists(path) != want {
			t.Errorf("%s: exists %v, want %v", path, !want, want)
		}
	}
}

// A touched file is used: it stays.
func TestTouch(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	path := filepath.Join(dir, "entry")
	file(t, dir, path, now, Unused+time.Hour)
	Touch(path, now)
	RemoveStale(dir, now)
	if !exists(path) {
		t.Fatal("a touched file was removed")
	}
}
