package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/config"
	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
)

// guestDir holds the guests the tests build, once per test binary, and
// cacheDir the compiled modules every node of the tests shares.
var (
	guestDir  string
	cacheDir  string
	guestOnce sync.Map // output name → *sync.Once
	guestErrs sync.Map // output name → error
)

// fileBucket opens the bucket-fs bucket in dir, closed when the test ends
// (after the nodes it started, whose cleanups run first).
func fileBucket(t *testing.T, dir string) bucket.Bucket {
	t.Helper()
	b, err := fsbucket.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// suiteCPUBudget is the guest CPU budget of the suite's servers, unless a
// test sets one (a node in process, or a process given the variable or the
// flag): a Go actor's first events fault in pages of its memory image,
// charged to the guest at 12 to 19 µs a page on this machine class and
// more under the suite's own load, which took ordinary first requests past
// the default 50 ms now and then (issue 24, item 15; issue 30). The tests
// of budgets set their own; those that hold work to the default name it.
const suiteCPUBudget = 250 * time.Millisecond

// engineNeutral marks a test whose outcome no engine or SQLite driver can
// change: a cluster protocol (ownership, leases, forwarding, deploys,
// failover), the command line and its builds, a bucket's or a transport's
// conformance, a control's planted fault. scripts/test runs this suite a
// second time on the other engine and driver with ENGINE_PASS=1, and that
// pass skips these: they ran in the first, and would add ten minutes to CI
// and test nothing new. What an engine or a driver does (guests, limits,
// host calls, SQL, sockets) runs in both passes; a driver's capture and
// restore for replication are storagetest's Replication rules, which
// plugins/storage-sqlite runs on both drivers.
func engineNeutral(t *testing.T) {
	t.Helper()
	if os.Getenv("ENGINE_PASS") != "" {
		t.Skip("the same on every engine and SQLite driver: run in the suite's first pass")
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("WASMKEEP_NODE__CPU_BUDGET_MS") == "" {
		os.Setenv("WASMKEEP_NODE__CPU_BUDGET_MS", strconv.Itoa(int(suiteCPUBudget.Milliseconds())))
	}
	dir, err := os.MkdirTemp("", "wasmkeep-guests-")
	if err != nil {
		panic(err)
	}
	guestDir = dir
	// The servers the tests start take the machine's cache by default
	// (ADR 1058): it is the suite's, never the user's home cache. Go's
	// build cache, which defaults to one beside it, stays where it was: the
	// guests and binaries the tests build would compile from scratch.
	// `go env` reads it as the go command does (a `go env -w` setting too).
	if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		os.Setenv("GOCACHE", strings.TrimSpace(string(out)))
	}
	os.Unsetenv("CACHE_DIRECTORY")
	// A folder of its own: the machine's cache would be dir/wasmkeep, the
	// path of the command the tests build.
	xdg := filepath.Join(dir, "xdg-cache")
	os.Setenv("XDG_CACHE_HOME", xdg)
	cacheDir = filepath.Join(xdg, "wasmkeep")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the module's root, two levels above this package.
func repoRoot(t testing.TB) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildGuest compiles the Go guest in pkg (relative to the repository root)
// for wasip1 and returns the .wasm path. ldflags make variants of one guest.
func buildGuest(t testing.TB, pkg, ldflags string) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_", "=", "_", ".", "_").Replace(pkg+ldflags) + ".wasm"
	out := filepath.Join(guestDir, name)
	buildOnce(t, name, func() error {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-ldflags", ldflags, "-o", out, "./"+pkg)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
		}
		return nil
	})
	return out
}

// buildOnce runs build for the output name once per test binary; a
// failure fails every test that asks for the output.
func buildOnce(t testing.TB, name string, build func() error) {
	t.Helper()
	once, _ := guestOnce.LoadOrStore(name, new(sync.Once))
	once.(*sync.Once).Do(func() {
		if err := build(); err != nil {
			guestErrs.Store(name, err)
		}
	})
	if err, ok := guestErrs.Load(name); ok {
		t.Fatal(err)
	}
}

// buildCGuest compiles the C guest in dir (relative to the repository
// root, every .c file of it) with the C SDK's sdk/c/wkcc, warnings as
// errors, and returns the .wasm path. Without clang wkcc fails saying what
// to install.
func buildCGuest(t testing.TB, dir string) string {
	t.Helper()
	name := "c_" + strings.ReplaceAll(dir, "/", "_") + ".wasm"
	out := filepath.Join(guestDir, name)
	buildOnce(t, name, func() error {
		root := repoRoot(t)
		srcs, _ := filepath.Glob(filepath.Join(root, dir, "*.c"))
		if len(srcs) == 0 {
			return fmt.Errorf("building %s: no .c files there", dir)
		}
		cmd := exec.Command(filepath.Join(root, "sdk/c/wkcc"), append([]string{"-Werror", "-o", out}, srcs...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", dir, err, b)
		}
		return nil
	})
	return out
}

func probe(t testing.TB) string   { return buildGuest(t, "cmd/wasmkeep/testdata/guests/probe", "") }
func counter(t testing.TB) string { return buildGuest(t, "examples/counter", "") }

// testNode is a node serving on 127.0.0.1 with the standard plugins.
type testNode struct {
	t       testing.TB
	node    *node.Node
	srv     *http.Server
	url     string
	log     *syncBuffer
	dataDir string         // opts.DataDir
	storage storage.Driver // the node's storage plugin: what has a database
	actors  int            // names handed out by tests that want new actors
	closed  *closedConns   // the connections the server has closed
}

// closedConns are the client addresses of the connections a server has
// closed: once it closes one, the handler of its request has returned.
type closedConns struct {
	mu    sync.Mutex
	addrs map[string]bool
}

func (c *closedConns) track(conn net.Conn, state http.ConnState) {
	if state == http.StateClosed {
		c.mu.Lock()
		c.addrs[conn.RemoteAddr().String()] = true
		c.mu.Unlock()
	}
}

func (c *closedConns) has(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[addr]
}

// startNode starts a node on the configured engine; opts.DataDir defaults
// to a new temp dir.
func startNode(t testing.TB, opts node.Options) *testNode {
	t.Helper()
	return startNodeOn(t, "", opts)
}

// startNodeOn starts a node on the named runtime plugin ("" for plugins.yaml's),
// with its tiering setting after a slash ("wazero/fast").
func startNodeOn(t testing.TB, engine string, opts node.Options) *testNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveNodeOn(t, engine, l, opts)
}

// serveNodeOn is startNodeOn serving on l, which it closes if the node
// cannot start.
func serveNodeOn(t testing.TB, engine string, l net.Listener, opts node.Options) *testNode {
	t.Helper()
	return serveNodeWith(t, engine, l, opts, nil)
}

// serveNodeWith is serveNodeOn with the storage plugin given to wrap, if
// set, and the node on what it returns.
func serveNodeWith(t testing.TB, engine string, l net.Listener, opts node.Options, wrap func(storage.Driver) storage.Driver) *testNode {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	if opts.CacheDir == "" {
		opts.CacheDir = cacheDir
	}
	if opts.CPUBudget == 0 {
		opts.CPUBudget = suiteCPUBudget
	}
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	rt, st := standardPlugins(t, engine)
	if wrap != nil {
		st = wrap(st)
	}
	n, err := node.New(context.Background(), opts, rt, st)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	srv := n.NewServer(l.Addr().String())
	closed := &closedConns{addrs: map[string]bool{}}
	srv.ConnState = closed.track
	go srv.Serve(l)
	tn := &testNode{t: t, node: n, srv: srv, url: "http://" + l.Addr().String(), log: logs, dataDir: opts.DataDir, storage: st, closed: closed}
	t.Cleanup(tn.stop)
	return tn
}

// stop shuts the node down as SIGTERM does; calling it twice is harmless.
func (tn *testNode) stop() {
	if tn.node != nil {
		tn.node.Shutdown(tn.srv, 10*time.Second)
		tn.node = nil
	}
}

// standardPlugins builds the runtime and storage plugins that plugins.yaml
// chooses, so the tests run the default configuration; WASMKEEP_* variables
// choose others (WASMKEEP_RUNTIME__USE=wasmtime runs this suite on wasmtime),
// and engine, if set, names the runtime plugin and, after a slash, its
// tiering setting.
func standardPlugins(t testing.TB, engine string) (runtime.Driver, storage.Driver) {
	t.Helper()
	reg, err := plugin.NewRegistry(plugins()...)
	if err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	if engine, tiering, ok := strings.Cut(engine, "/"); ok {
		env = append(env, "WASMKEEP_RUNTIME__"+strings.ToUpper(engine)+"__TIERING="+tiering)
	}
	if engine, _, _ := strings.Cut(engine, "/"); engine != "" {
		env = append(env, "WASMKEEP_RUNTIME__USE="+engine)
	}
	cfg, err := config.Load(wasmkeep.DefaultConfig, "", env, reg, command.APIs)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := cfg.Plugins[plugin.Runtime].New()
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.Plugins[plugin.Storage].New()
	if err != nil {
		t.Fatal(err)
	}
	return rt.(runtime.Driver), st.(storage.Driver)
}

// do sends a request and returns the status and body.
func (tn *testNode) do(method, path, body string) (int, string) {
	tn.t.Helper()
	code, b, _ := tn.doH(method, path, body, nil)
	return code, b
}

func (tn *testNode) doH(method, path, body string, hdr http.Header) (int, string, http.Header) {
	tn.t.Helper()
	req, err := http.NewRequest(method, tn.url+path, strings.NewReader(body))
	if err != nil {
		tn.t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tn.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// expect checks a request's status and body.
func (tn *testNode) expect(method, path, body string, wantCode int, wantBody string) {
	tn.t.Helper()
	code, got := tn.do(method, path, body)
	if code != wantCode || got != wantBody {
		tn.t.Fatalf("%s %s: got %d %q, want %d %q", method, path, code, got, wantCode, wantBody)
	}
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveBinary runs `bin serve --listen 127.0.0.1:0 args...` with env
// (nil: this process's), waits until the node is ready and returns its URL
// (the port it bound, read from its log), the process (killed at cleanup if
// still running) and its output. The node picks its own port: one picked
// here and freed before the node binds it may be taken meanwhile, by a
// connection or by the node's own cluster listener.
func serveBinary(t *testing.T, bin string, env []string, args ...string) (string, *exec.Cmd, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Env = logs, logs, env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// A start compiles the classes: on wasmtime, three nodes starting at
	// once on a loaded 2-core machine took 15 s and more.
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if addr := boundAddr(args, cmd.Process.Pid, logs.String()); addr != "" {
			url := "http://" + addr
			var resp *http.Response
			if resp, err = http.Get(url + "/_wasmkeep/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return url, cmd, logs
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %v\n%s", err, logs.String())
		}
	}
}

// boundAddr is the address the node serve started as pid with args
// listens on: its log's line "serving", or, when the log level hides it,
// its data directory's lock file, which names the process and the address
// bound; "" until either says.
func boundAddr(args []string, pid int, log string) string {
	if addr := servingAddr(log); addr != "" {
		return addr
	}
	if i := slices.Index(args, "--data-dir"); i >= 0 && i+1 < len(args) {
		b, _ := os.ReadFile(filepath.Join(args[i+1], "wasmkeep.lock"))
		if m := lockLine.FindStringSubmatch(string(b)); m != nil && m[1] == strconv.Itoa(pid) && !strings.HasSuffix(m[2], ":0") {
			return m[2]
		}
	}
	return ""
}

var lockLine = regexp.MustCompile(`^pid (\d+), started \S+, listening on (\S+)\n`)

// servingAddr is the address a node's log says it serves on (its line
// "serving", text or JSON), or "".
func servingAddr(log string) string {
	m := servingLine.FindStringSubmatch(log)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

var servingLine = regexp.MustCompile(`msg=serving listen=(\S+)|"msg":"serving","listen":"([^"]+)"`)
