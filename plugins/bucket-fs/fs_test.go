package fsbucket

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"golang.org/x/sys/unix"
)

func put(t testing.TB, b bucket.Bucket, key, body string) bucket.Version {
	t.Helper()
	v, err := b.Put(t.Context(), key, strings.NewReader(body), int64(len(body)), bucket.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLayout: an object is a file at its key's path under the directory,
// holding the header and then its bytes; the bucket's own files are never
// listed, and neither are names no key can have.
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	put(t, b, "owners/acme/chat/caf%C3%A9", "x")
	put(t, b, ".hidden/..dots/~n", "yz")
	data, err := os.ReadFile(filepath.Join(dir, "owners", "acme", "chat", "caf%C3%A9"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != int(headerLen)+1 || string(data[:len(magic)]) != magic || data[headerLen] != 'x' {
		t.Fatalf("the object's file holds %q", data)
	}
	for _, stray := range []string{"has space", "UPPER@x", "owners/acme/bad name"} {
		if err := os.WriteFile(filepath.Join(dir, stray), []byte("not an object"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := listKeys(t, b, ""), []string{".hidden/..dots/~n", "owners/acme/chat/caf%C3%A9"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	// Keys that would leave the directory never reach the file system.
	outside := filepath.Join(filepath.Dir(dir), "escaped")
	for _, key := range []string{"../escaped", "a/../../escaped", "/" + outside, "a/./../../escaped"} {
		if _, err := b.Put(t.Context(), key, strings.NewReader("x"), 1, bucket.Condition{}); !errors.Is(err, bucket.ErrInvalidKey) {
			t.Errorf("Put %q: %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a write escaped the directory: %v", err)
	}
}

// TestForeignFile: a file with a key's name but no header is refused by
// name, not served as an object.
func TestForeignFile(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "notes"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(t.Context(), "notes", bucket.GetOptions{}); err == nil || !strings.Contains(err.Error(), "is not a bucket-fs object") {
		t.Fatalf("Get of a foreign file: %v", err)
	}
	if _, err := b.List(t.Context(), "", bucket.ListOptions{}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "notes")) {
		t.Fatalf("List over a foreign file: %v", err)
	}
}

// TestObjectAndParent: a key cannot be both an object and the parent of
// others here (the contract lets a file-system provider refuse it); the
// refusal is ErrInvalidKey, and the refused write leaves nothing.
func TestObjectAndParent(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	put(t, b, "a/b", "1")
	put(t, b, "c", "2")
	for _, key := range []string{"a", "c/d", "c/d/e"} {
		_, err := b.Put(t.Context(), key, strings.NewReader("x"), 1, bucket.Condition{})
		if !errors.Is(err, bucket.ErrInvalidKey) {
			t.Errorf("Put %s: %v, want ErrInvalidKey", key, err)
		}
		if _, err := b.Get(t.Context(), key, bucket.GetOptions{}); !errors.Is(err, bucket.ErrNotFound) {
			t.Errorf("Get %s: %v, want ErrNotFound", key, err)
		}
	}
	if got, want := listKeys(t, b, ""), []string{"a/b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	if des, _ := os.ReadDir(filepath.Join(dir, metaDir, "tmp")); len(des) != 0 {
		t.Fatalf("refused writes left %d temporary files", len(des))
	}
}

// TestDeletePrunes: a delete removes the directories it leaves empty, and
// only those.
func TestDeletePrunes(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	put(t, b, "x/y/z/1", "a")
	put(t, b, "x/2", "b")
	if err := b.Delete(t.Context(), "x/y/z/1", bucket.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x", "y")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("x/y is left after its last object went: %v", err)
	}
	if got := readAll(t, b, "x/2"); got != "b" {
		t.Fatalf("x/2 holds %q", got)
	}
}

// TestWritesRaceDeletes: writes into a directory that deletes keep
// emptying and removing all succeed (a write makes a removed parent again).
func TestWritesRaceDeletes(t *testing.T) {
	const workers, rounds = 4, 60
	b := openT(t, t.TempDir())
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				key := fmt.Sprintf("shared/dir/w%d-%d", w, r%3)
				if _, err := b.Put(t.Context(), key, strings.NewReader("v"), 1, bucket.Condition{}); err != nil {
					errs <- err
					return
				}
				if err := b.Delete(t.Context(), key, bucket.Condition{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if keys := listKeys(t, b, ""); len(keys) != 0 {
		t.Fatalf("left %q", keys)
	}
}

// TestOpensRace: several opens of one directory in one process (as two
// nodes in one test binary would be) race on one create per round; the
// shards' directories, not the mutual exclusion within one open, let
// exactly one win.
func TestOpensRace(t *testing.T) {
	const opens, rounds = 4, 50
	dir := t.TempDir()
	bs := make([]bucket.Bucket, opens)
	for i := range bs {
		bs[i] = openT(t, dir)
	}
	for r := range rounds {
		key := fmt.Sprintf("race/%d", r)
		wins := make(chan int, opens)
		var wg sync.WaitGroup
		for i, b := range bs {
			wg.Go(func() {
				_, err := b.Put(t.Context(), key, strings.NewReader("x"), 1, bucket.Condition{IfAbsent: true})
				switch {
				case err == nil:
					wins <- i
				case !errors.Is(err, bucket.ErrPrecondition):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if len(wins) != 1 {
			t.Fatalf("round %d: %d opens won the create", r, len(wins))
		}
	}
}

func TestClosed(t *testing.T) {
	b := openT(t, t.TempDir())
	put(t, b, "k", "v")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(t.Context(), "k", strings.NewReader("w"), 1, bucket.Condition{}); !errors.Is(err, errClosed) {
		t.Errorf("Put after Close: %v", err)
	}
	if _, err := b.Get(t.Context(), "k", bucket.GetOptions{}); !errors.Is(err, errClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestRefusedFileSystems: network file systems, and file systems that
// ignore case (seen through the shards directory's name in capitals).
func TestRefusedFileSystems(t *testing.T) {
	if err := refuseFileSystem(unix.NFS_SUPER_MAGIC); err == nil || !strings.Contains(err.Error(), "NFS") {
		t.Errorf("NFS: %v", err)
	}
	if err := refuseFileSystem(unix.EXT4_SUPER_MAGIC); err != nil {
		t.Errorf("ext4: %v", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, metaDir, "SHARDS"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "ignores case") {
		t.Errorf("a directory whose shards answer to SHARDS: %v", err)
	}
}

func TestPlugin(t *testing.T) {
	reg, err := plugin.NewRegistry(Info())
	if err != nil {
		t.Fatal(err)
	}
	in, err := reg.Lookup(plugin.Bucket, "fs")
	if err != nil {
		t.Fatal(err)
	}
	if err := plugin.CheckAPI(in, bucket.API); err != nil {
		t.Fatal(err)
	}
	cfg := in.NewConfig().(*Config)
	cfg.Dir = filepath.Join(t.TempDir(), "new", "bucket")
	v, err := in.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := v.(bucket.Bucket)
	defer b.Close()
	put(t, b, "k", "v")
	if _, err := os.Stat(filepath.Join(cfg.Dir, "k")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.New(&Config{}); err == nil || !strings.Contains(err.Error(), "bucket.fs.dir") {
		t.Errorf("an empty dir: %v", err)
	}
}

// TestTempFileAge: Open leaves an unlocked temporary file, and a writer's
// staging directory, alone while young (its writer may not have locked it
// yet, or waits for a shard), and removes them once old.
func TestTempFileAge(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir)
	tmp := filepath.Join(dir, metaDir, "tmp", "put-young")
	if err := os.WriteFile(tmp, []byte(magic), 0o600); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(dir, metaDir, "tmp", "lock-1-young")
	if err := os.MkdirAll(filepath.Join(staging, "1-young"), 0o700); err != nil {
		t.Fatal(err)
	}
	openT(t, dir)
	for _, p := range []string{tmp, staging} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("Open removed %s, made a moment ago: %v", p, err)
		}
	}
	old := time.Now().Add(-2 * staleAfter)
	for _, p := range []string{tmp, staging} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	openT(t, dir)
	for _, p := range []string{tmp, staging} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Open left the old %s: %v", p, err)
		}
	}
}

// --bucket file:///DIR names a directory on this machine by its absolute
// path; a relative path, another host or a query is refused, naming it.
func TestFromURL(t *testing.T) {
	for raw, want := range map[string]string{
		"file:///srv/bucket":           "/srv/bucket",
		"file://localhost/srv/bucket/": "/srv/bucket",
		"file:///srv/a%20b":            "/srv/a b",
		"file:relative/dir":            "ABSOLUTE",
		"file://":                      "ABSOLUTE",
		"file://nas/srv/bucket":        `not host "nas"`,
		"file:///srv/bucket?x=1":       "without credentials, query",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg := NewConfig()
		got := ""
		if err := FromURL(u, cfg); err != nil {
			got = err.Error()
		} else {
			got = cfg.Dir
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %s", raw, got, want)
		}
	}
}

// A dead holder's lock is broken even when every write that meets it gives
// up sooner than breakAfter (a lease write's attempt at short settings):
// this process's waiters share what they saw of the holder, so their waits
// add up to a break.
func TestDeadHolderBrokenByShortWaits(t *testing.T) {
	dir := t.TempDir()
	b := openT(t, dir)
	const key = "nodes/a"
	shard := filepath.Join(dir, metaDir, "shards", fmt.Sprintf("%02x", shardOf(key)))
	os.RemoveAll(shard)
	if err := os.MkdirAll(filepath.Join(shard, "1-dead"), 0o700); err != nil { // a holder that died holding it
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * breakAfter)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), breakAfter/5)
		_, err := b.Put(ctx, key, strings.NewReader("x"), 1, bucket.Condition{})
		cancel()
		if err == nil {
			t.Logf("written at try %d", try)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d writes of %v each: %v; want the dead holder's lock broken", try, breakAfter/5, err)
		}
	}
}
