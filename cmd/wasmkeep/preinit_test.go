package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func preinitGuest(t testing.TB, ldflags string) string {
	return buildGuest(t, "cmd/wasmkeep/testdata/guests/preinit", ldflags)
}

// tokens asks two new actors of class p for their init tokens, and checks
// the random bytes each read in the request differ.
func tokens(tn *testNode) (initA, initB string) {
	tn.t.Helper()
	var fresh []string
	var init []string
	for range 2 {
		tn.actors++
		name := fmt.Sprint("a", tn.actors)
		code, body := tn.do("GET", "/actor/p/"+name, "")
		tok, f, ok := strings.Cut(body, " ")
		if code != 200 || !ok {
			tn.t.Fatalf("GET %s: %d %q", name, code, body)
		}
		init, fresh = append(init, tok), append(fresh, f)
	}
	if fresh[0] == fresh[1] {
		tn.t.Errorf("two requests read the same random bytes %s: crypto/rand must ask the host each time", fresh[0])
	}
	return init[0], init[1]
}

// A module that asks is started once: its actors share what its init did
// (here a token from crypto/rand), where without pre-initialisation (the
// control) each instance runs init and gets its own. The snapshot is kept
// in the cache directory: a restart starts from the same one.
func TestPreinitSharesTheStartAndKeepsIt(t *testing.T) {
	wasm := preinitGuest(t, "")
	cache := t.TempDir()
	opts := node.Options{Classes: map[string]string{"p": wasm}, CacheDir: cache}
	tn := startNode(t, opts)
	// The class serves at once, and its new instances start from the
	// snapshot once it is made, in the background; an actor woken before
	// (most likely) keeps its instance of the module the snapshot replaced.
	early, _ := tokens(tn)
	waitLog(t, tn, `msg="module pre-initialised"`)
	if code, body := tn.do("GET", "/actor/p/a1", ""); code != 200 || !strings.HasPrefix(body, early+" ") {
		t.Errorf("the actor woken first, after the snapshot replaced its module: %d %q, want its token %s", code, body, early)
	}
	a, b := tokens(tn)
	if a != b {
		t.Errorf("actors of a pre-initialised module got init tokens %s and %s: init ran in each", a, b)
	}
	kept, _ := filepath.Glob(filepath.Join(cache, "preinit", "v1-*.wasm"))
	if len(kept) != 1 {
		t.Fatalf("kept snapshots: %v, want one", kept)
	}
	tn.stop()

	// A start removes kept files no start used for a week, and only those.
	stale, recent := filepath.Join(cache, "preinit", "v1-stale.wasm"), filepath.Join(cache, "preinit", "v1-recent.wasm")
	for _, f := range []string{stale, recent} {
		os.WriteFile(f, []byte("x"), 0o600)
	}
	weekAgo := time.Now().Add(-8 * 24 * time.Hour)
	os.Chtimes(stale, weekAgo, weekAgo)
	os.Chtimes(kept[0], weekAgo, weekAgo) // used at the start below: kept
	again := startNode(t, opts)
	if _, err := os.Stat(stale); err == nil {
		t.Error("a kept file unused for a week is still there")
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent kept file was removed: %v", err)
	}
	os.Remove(recent)
	if a2, _ := tokens(again); a2 != a {
		t.Errorf("after a restart the init token is %s, want the kept snapshot's %s", a2, a)
	}
	if strings.Contains(again.log.String(), `msg="module pre-initialised"`) {
		t.Error("the restart pre-initialised the module again instead of using the kept snapshot")
	}
	again.stop()

	// Another build of the module has a snapshot of its own.
	variant := startNode(t, node.Options{Classes: map[string]string{"p": preinitGuest(t, "-X main.variant=2")}, CacheDir: cache})
	waitLog(t, variant, `msg="module pre-initialised"`)
	if v, _ := tokens(variant); v == a {
		t.Errorf("another build of the module started from the first one's snapshot (token %s)", v)
	}
	variant.stop()
	if kept, _ := filepath.Glob(filepath.Join(cache, "preinit", "v1-*.wasm")); len(kept) != 2 {
		t.Errorf("kept snapshots after a second build: %v, want two", kept)
	}

	// A kept file that is not a module is made again.
	os.WriteFile(kept[0], []byte("not wasm"), 0o600)
	third := startNode(t, opts)
	waitLog(t, third, `msg="module pre-initialised"`)
	if a3, b3 := tokens(third); a3 != b3 || a3 == a {
		t.Errorf("from a damaged kept file: tokens %s and %s (the first start's %s)", a3, b3, a)
	}
	if log := third.log.String(); !strings.Contains(log, "not usable; making it again") {
		t.Errorf("the log does not report the damaged file:\n%s", log)
	}
	third.stop()

	opts.NoPreinit = true
	control := startNode(t, opts)
	if a, b := tokens(control); a == b {
		t.Errorf("without pre-initialisation two actors got the same init token %s", a)
	}
	// Said once, so that a benchmark waiting for a snapshot knows none comes.
	if log := control.log.String(); !strings.Contains(log, `msg="module not pre-initialised"`) || !strings.Contains(log, "pre-initialisation is off") {
		t.Errorf("the log does not say pre-initialisation is off:\n%s", log)
	}
}

// A module whose init calls the host cannot be pre-initialised: it is
// served as if it had not asked, and the log names the call.
func TestPreinitRefusedWhenInitCallsTheHost(t *testing.T) {
	tn := startNode(t, node.Options{Classes: map[string]string{"p": preinitGuest(t, "-X main.hostInInit=1")}, CacheDir: t.TempDir()})
	waitLog(t, tn, `msg="module not pre-initialised"`)
	if !strings.Contains(tn.log.String(), "wasmkeep.env_get called while the module was pre-initialised") {
		t.Errorf("the log does not say why the module was not pre-initialised:\n%s", tn.log.String())
	}
	if a, b := tokens(tn); a == b {
		t.Errorf("actors got the same init token %s: the module was pre-initialised", a)
	}
}

// waitLog waits for the node's log to contain s.
func waitLog(t testing.TB, tn *testNode, s string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(tn.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %s:\n%s", s, tn.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
