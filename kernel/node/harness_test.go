package node

// Tests that run real guests on a real node: the wazero engine and the
// SQLite storage plugin (modernc), as the server runs them. Only these
// tests import plugins; the package itself never does.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

var (
	guestDir   string // the guests built once per test binary, and their compiled code
	guestMu    sync.Mutex
	guestBuilt = map[string]error{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmkeep-node-guests-")
	if err != nil {
		panic(err)
	}
	guestDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildGuest compiles the Go guest in cmd/wasmkeep/testdata/guests/<name>
// for wasip1, once, and returns the .wasm path.
func buildGuest(t testing.TB, name string) string {
	t.Helper()
	out := filepath.Join(guestDir, name+".wasm")
	guestMu.Lock()
	defer guestMu.Unlock()
	err, done := guestBuilt[name]
	if !done {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./cmd/wasmkeep/testdata/guests/"+name)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("building guest %s: %v\n%s", name, e, b)
		}
		guestBuilt[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newTestNode starts a node serving the probe and room guests, with opts
// (DataDir, Classes and Logger are filled in).
func newTestNode(t testing.TB, opts Options) *Node {
	t.Helper()
	opts.DataDir = t.TempDir()
	opts.CacheDir = filepath.Join(guestDir, "cache")
	opts.Classes = map[string]string{"probe": buildGuest(t, "probe"), "room": buildGuest(t, "room")}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rt, err := wazeroruntime.Info().New(&wazeroruntime.Config{Compiler: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestorage.New(sqlitestorage.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(context.Background(), opts, rt.(runtime.Driver), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// do serves one request on n and returns the status and body.
func do(t testing.TB, n *Node, method, target, body string) (int, string, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	n.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w.Code, w.Body.String(), w.Header()
}

// expect serves one request and checks its answer.
func expect(t testing.TB, n *Node, method, target, body string, status int, want string) {
	t.Helper()
	code, got, _ := do(t, n, method, target, body)
	if code != status || got != want {
		t.Fatalf("%s %s: %d %q, want %d %q", method, target, code, got, status, want)
	}
}

// resident reports whether the actor class/name has a mailbox on n.
func resident(n *Node, class, name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.actors[n.opts.Tenant+"/"+class+"/"+name] != nil
}

// waitFor waits until cond holds: for what another goroutine does in
// response to a step the test took (the clock moved, a request sent). It
// orders nothing; it fails the test if cond does not come within a
// minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
