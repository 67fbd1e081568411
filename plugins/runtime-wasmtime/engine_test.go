//go:build cgo

package wasmtimeruntime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/runtimetest"
	"github.com/wasmkeep/wasmkeep/internal/cacheprune"
	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The tests here cover what is particular to this engine; the contract's
// rules are conformance/runtimetest's (TestConformance).

// wasmMod is a minimal module encoder for these tests.
type wasmMod struct {
	types   [][]byte // encoded func types
	imports [][]byte
	nImport uint32
	funcs   []uint32 // type index per defined function
	code    [][]byte // body per defined function, without locals or end
	exports [][]byte
	start   int // function index, -1 for none
}

func newWasmMod() *wasmMod { return &wasmMod{start: -1} }

func (m *wasmMod) typ(params, results string) uint32 {
	enc := func(s string) []byte {
		out := []byte{byte(len(s))}
		for _, c := range s {
			out = append(out, map[rune]byte{'i': 0x7f, 'I': 0x7e, 'f': 0x7d, 'F': 0x7c}[c])
		}
		return out
	}
	m.types = append(m.types, append(append([]byte{0x60}, enc(params)...), enc(results)...))
	return uint32(len(m.types) - 1)
}

// importFunc imports a function and exports it under its own name.
func (m *wasmMod) importFunc(module, name, params, results string) uint32 {
	t := m.typ(params, results)
	m.imports = append(m.imports, cat(str(module), str(name), []byte{0, byte(t)}))
	m.export(name, 0, m.nImport)
	m.nImport++
	return m.nImport - 1
}

// function defines a function, exported as name unless that is "".
func (m *wasmMod) function(name, params, results string, body ...byte) uint32 {
	m.funcs = append(m.funcs, m.typ(params, results))
	m.code = append(m.code, body)
	idx := m.nImport + uint32(len(m.funcs)) - 1
	if name != "" {
		m.export(name, 0, idx)
	}
	return idx
}

func (m *wasmMod) export(name string, kind byte, idx uint32) {
	m.exports = append(m.exports, cat(str(name), []byte{kind, byte(idx)}))
}

// bytes encodes the module with one exported page of memory.
func (m *wasmMod) bytes() []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	section := func(id byte, entries [][]byte) {
		if len(entries) > 0 {
			body := cat(append([][]byte{{byte(len(entries))}}, entries...)...)
			out = append(append(append(out, id), uleb(len(body))...), body...)
		}
	}
	section(1, m.types)
	section(2, m.imports)
	var funcs, code [][]byte
	for i, t := range m.funcs {
		funcs = append(funcs, []byte{byte(t)})
		body := append(append([]byte{0}, m.code[i]...), 0x0b)
		code = append(code, append(uleb(len(body)), body...))
	}
	section(3, funcs)
	section(5, [][]byte{{0, 1}})
	section(7, append(m.exports, cat(str("memory"), []byte{2, 0})))
	if m.start >= 0 {
		out = append(out, 8, 1, byte(m.start))
	}
	section(10, code)
	return out
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
func str(s string) []byte     { return append(uleb(len(s)), s...) }

func uleb(n int) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		if n >>= 7; n == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// start compiles and instantiates wasm on a new engine.
func start(t *testing.T, cfg runtime.Config, wasm []byte, icfg runtime.InstanceConfig) (*engine, runtime.Instance) {
	t.Helper()
	m := compile(t, cfg, wasm)
	in, err := m.Instantiate(t.Context(), icfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	return m.e, in
}

// compile compiles wasm on a new engine; both are closed with the test.
func compile(t *testing.T, cfg runtime.Config, wasm []byte) *module {
	t.Helper()
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = 16
	}
	if cfg.HostModule == "" {
		cfg.HostModule = "wasmkeep"
	}
	e, err := newDriver(t).NewEngine(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	m, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m.(*module)
}

func callOK(t *testing.T, in runtime.Instance, name string, args ...uint64) []uint64 {
	t.Helper()
	stack := make([]uint64, max(len(args), 2))
	copy(stack, args)
	if err := in.Function(name).Call(t.Context(), stack); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return stack
}

func TestTidy(t *testing.T) {
	for in, want := range map[string]string{
		"error while executing at wasm backtrace:\n    0:     0x41 - <unknown>!<wasm function 1>\n    1:     0x50 - m!f\n\nCaused by:\n    wasm trap: wasm `unreachable` instruction executed\n\nStack backtrace:\n   0: <unknown>\n": "wasm trap: wasm `unreachable` instruction executed (wasm backtrace: 0: 0x41 - <unknown>!<wasm function 1>; 1: 0x50 - m!f)",
		"failed to parse WebAssembly module\n\nCaused by:\n    unexpected end-of-file (at offset 0x10)\n\nStack backtrace:\n   0: <unknown>":                                                                                          "failed to parse WebAssembly module: unexpected end-of-file (at offset 0x10)",
		"a\n\nCaused by:\n    0: b\n    1: c": "a: b: c",
		"plain message\x00":                   "plain message",
		"two\nlines":                          "two lines",
	} {
		if got := tidy(in); got != want {
			t.Errorf("tidy(%q) =\n %q, want\n %q", in, got, want)
		}
	}
}

// A fault in a host function is a Go panic like any other: the call fails,
// the process lives on. (Wasmtime's signal handler passes faults outside
// guest code to Go's.)
func TestHostFunctionFault(t *testing.T) {
	m := newWasmMod()
	m.importFunc("wasmkeep", "fault", "", "")
	fns := []runtime.HostFunction{{Name: "fault", Func: func(context.Context, runtime.Memory, []uint64) {
		var p *[8]byte
		p[3] = 1
	}}}
	_, in := start(t, runtime.Config{HostFunctions: fns}, m.bytes(), runtime.InstanceConfig{})
	err := in.Function("fault").Call(t.Context(), nil)
	var rerr interface{ RuntimeError() }
	if !errors.As(err, &rerr) || errors.Is(err, runtime.ErrInterrupted) {
		t.Fatalf("error %v, want one wrapping the runtime error", err)
	}
}

// A start function that calls the host sees the guest's memory.
func TestStartFunctionMemory(t *testing.T) {
	m := newWasmMod()
	m.start = int(m.importFunc("wasmkeep", "seen", "", ""))
	var size uint32
	fns := []runtime.HostFunction{{Name: "seen", Func: func(_ context.Context, mem runtime.Memory, _ []uint64) {
		size = mem.Size()
	}}}
	start(t, runtime.Config{HostFunctions: fns}, m.bytes(), runtime.InstanceConfig{})
	if size != 65536 {
		t.Errorf("the start function's host call saw a memory of %d bytes, want 65536", size)
	}
}

// A guest spinning without calls stops within a few ticks of its ctx.
func TestInterruptLatency(t *testing.T) {
	m := newWasmMod()
	m.function("spin", "", "", 0x03, 0x40, 0x0c, 0x00, 0x0b) // loop br 0 end
	e, in := start(t, runtime.Config{}, m.bytes(), runtime.InstanceConfig{})
	const after = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), after)
	defer cancel()
	begin := time.Now()
	err := in.Function("spin").Call(ctx, nil)
	late := time.Since(begin) - after
	t.Logf("returned %v after the deadline", late)
	if !errors.Is(err, runtime.ErrInterrupted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want ErrInterrupted and DeadlineExceeded", err)
	}
	if late > 500*time.Millisecond {
		t.Errorf("the guest stopped %v after its deadline", late)
	}
	// The ticker stops once no call has run for a while.
	for deadline := time.Now().Add(10 * time.Second); e.ticking.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the epoch ticker still runs with no call in flight")
		}
	}
}

// cachedEngine starts an engine whose compile cache is in dir, closed when
// the test ends.
func cachedEngine(t *testing.T, dir string) *engine {
	t.Helper()
	e, err := newDriver(t).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1, CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e.(*engine)
}

// compileKept compiles wasm on e and waits until its optimised code is in
// the cache.
func compileKept(t *testing.T, e *engine, wasm []byte) {
	t.Helper()
	mod, err := e.Compile(t.Context(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	<-mod.(runtime.Tiered).Optimised() // kept in the cache
	mod.Close(t.Context())
}

// The cache keeps one file per module; a damaged one is replaced.
func TestCacheFiles(t *testing.T) {
	dir := t.TempDir()
	m := newWasmMod()
	m.function("one", "", "i", 0x41, 0x01) // i32.const 1
	wasm := m.bytes()
	compileIn := func() *engine {
		e := cachedEngine(t, dir)
		compileKept(t, e, wasm)
		return e
	}
	e := compileIn()
	files, _ := filepath.Glob(filepath.Join(dir, "wasmtime-*", "*"))
	if len(files) != 1 || !strings.HasSuffix(files[0], ".cwasm") {
		t.Fatalf("cache holds %v, want one .cwasm file", files)
	}
	if runtimetest.CodeMappedFrom(t, dir) {
		t.Fatal("code compiled afresh is mapped from the cache's file")
	}
	// Read and copied, as from a file system not known to be local.
	if ptr := e.deserializeRead(files[0]); ptr == nil {
		t.Fatal("the cached module does not load read")
	} else {
		newModule(e, e.opt, ptr).Close(t.Context())
	}
	if ptr := e.loadCached(wasm); ptr == nil {
		t.Fatal("the cached module does not load")
	} else {
		// Its code is the file's pages, not a copy.
		if !runtimetest.CodeMappedFrom(t, dir) {
			t.Error("code loaded from the cache is not mapped from its file")
		}
		newModule(e, e.opt, ptr).Close(t.Context())
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)/2] ^= 1 // in the artifact's code: only the checksum can tell
	os.WriteFile(files[0], b, 0o600)
	if ptr := e.loadCached(wasm); ptr != nil {
		t.Fatal("a damaged cache file loaded")
	}
	e = compileIn()
	if ptr := e.loadCached(wasm); ptr == nil {
		t.Fatal("the damaged cache file was not replaced")
	} else {
		newModule(e, e.opt, ptr).Close(t.Context())
	}
}

// A cache file's artifact is taken only with its marker and checksum after
// it: not with a byte of it changed, not cut short, not in the earlier
// layout (a header and a digest before the artifact).
func TestCacheFileChecksum(t *testing.T) {
	artifact := bytes.Repeat([]byte("\x7fELF artifact "), 100)
	file := binary.LittleEndian.AppendUint32(append(bytes.Clone(artifact), cacheMagic...), crc32.Checksum(artifact, castagnoli))
	if got, ok := artifactOf(file); !ok || !bytes.Equal(got, artifact) {
		t.Fatalf("artifactOf(a file as keep writes it) = %d bytes, %v", len(got), ok)
	}
	changed := bytes.Clone(file)
	changed[len(artifact)/2] ^= 1
	earlier := append([]byte("wasmkeep wasmtime cache 1\n"), make([]byte, 32)...)
	for name, b := range map[string][]byte{
		"changed": changed, "cut short": file[:len(file)-1], "earlier layout": append(earlier, artifact...), "empty": nil,
	} {
		if _, ok := artifactOf(b); ok {
			t.Errorf("artifactOf took a file %s", name)
		}
	}
}

// A load marks its file used; an engine's start removes the files no start
// used for a week and the folders of other versions unused as long
// (cacheprune), and keeps its own folder; an engine running on a folder
// another build's start removed makes it again.
func TestCachePruned(t *testing.T) {
	root := t.TempDir()
	start := func() *engine { return cachedEngine(t, root) }
	// compile compiles a module returning i into e's cache.
	compile := func(e *engine, i byte) []byte {
		m := newWasmMod()
		m.function("one", "", "i", 0x41, i) // i32.const i
		wasm := m.bytes()
		compileKept(t, e, wasm)
		return wasm
	}
	e := start()
	used, unused := compile(e, 0), compile(e, 1)
	oldVersion := filepath.Join(root, "wasmtime-0.0.0-linux-amd64", "old.cwasm")
	os.MkdirAll(filepath.Dir(oldVersion), 0o700)
	os.WriteFile(oldVersion, nil, 0o600)
	week := time.Now().Add(-cacheprune.Unused - time.Hour)
	for _, path := range []string{e.cachePath(used), e.cachePath(unused), oldVersion, filepath.Dir(oldVersion), e.cacheDir} {
		if err := os.Chtimes(path, week, week); err != nil {
			t.Fatal(err)
		}
	}
	if ptr := e.loadCached(used); ptr == nil {
		t.Fatal("the cached module does not load")
	} else {
		newModule(e, e.opt, ptr).Close(t.Context())
	}

	start()
	for path, want := range map[string]bool{
		e.cachePath(used):        true,
		e.cachePath(unused):      false,
		filepath.Dir(oldVersion): false,
		e.cacheDir:               true,
	} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", path, !want, want)
		}
	}

	// A week on, another build's start removes this build's folder: e
	// keeps what it compiles next all the same.
	cacheprune.Prune(root, "wasmtime-", "", time.Now().Add(2*cacheprune.Unused))
	if _, err := os.Stat(e.cachePath(compile(e, 2))); err != nil {
		t.Errorf("not kept after its folder was removed: %v", err)
	}
}

// fd_write gathers every buffer into one Write and fails on other
// descriptors and on writer errors.
func TestFdWrite(t *testing.T) {
	m := newWasmMod()
	m.importFunc("wasi_snapshot_preview1", "fd_write", "iiii", "i")
	var out bytes.Buffer
	_, in := start(t, runtime.Config{}, m.bytes(), runtime.InstanceConfig{Stdout: &out, Stderr: failWriter{}})
	mem := in.Memory()
	mem.Write(100, []byte("abcdefgh"))
	iovs := binary.LittleEndian.AppendUint32(nil, 100)
	for _, v := range []uint32{2, 0, 0, 102, 3, 105, 3} {
		iovs = binary.LittleEndian.AppendUint32(iovs, v)
	}
	mem.Write(0, iovs)
	for _, tc := range []struct {
		fd, iovs, n uint64
		errno       uint64
		written     uint32
	}{
		{1, 0, 4, errnoSuccess, 8},
		{1, 0, 0, errnoSuccess, 0},
		{2, 0, 4, errnoIO, 0},
		{0, 0, 1, errnoBadf, 0},
		{3, 0, 1, errnoBadf, 0},
		{1, 65536 - 4, 1, errnoFault, 0},
	} {
		mem.Write(64, make([]byte, 4))
		stack := []uint64{tc.fd, tc.iovs, tc.n, 64}
		if err := in.Function("fd_write").Call(t.Context(), stack); err != nil {
			t.Fatal(err)
		}
		b, _ := mem.Read(64, 4)
		if stack[0] != tc.errno || binary.LittleEndian.Uint32(b) != tc.written {
			t.Errorf("fd_write(%d, %d, %d) = errno %d, %d written; want %d, %d",
				tc.fd, tc.iovs, tc.n, stack[0], binary.LittleEndian.Uint32(b), tc.errno, tc.written)
		}
	}
	if out.String() != "abcdefgh" {
		t.Errorf("stdout got %q, want %q", out.String(), "abcdefgh")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("no") }

// poll_oneoff: descriptors are ready at once, only the first clock fires,
// absolute realtime timeouts work, unknown subscriptions fail.
func TestPollOneoff(t *testing.T) {
	m := newWasmMod()
	m.importFunc("wasi_snapshot_preview1", "poll_oneoff", "iiii", "i")
	_, in := start(t, runtime.Config{}, m.bytes(), runtime.InstanceConfig{})
	mem := in.Memory()
	clock := func(userdata uint64, id uint32, timeout uint64, flags uint16) []byte {
		b := make([]byte, subscriptionSize)
		binary.LittleEndian.PutUint64(b, userdata)
		binary.LittleEndian.PutUint32(b[16:], id)
		binary.LittleEndian.PutUint64(b[24:], timeout)
		binary.LittleEndian.PutUint16(b[40:], flags)
		return b
	}
	fd := func(userdata uint64, kind byte, fd uint32) []byte {
		b := make([]byte, subscriptionSize)
		binary.LittleEndian.PutUint64(b, userdata)
		b[8] = kind
		binary.LittleEndian.PutUint32(b[16:], fd)
		return b
	}
	type event struct {
		userdata uint64
		errno    uint16
		kind     byte
	}
	poll := func(subs ...[]byte) (errno uint64, events []event) {
		mem.Write(1000, cat(subs...))
		stack := []uint64{1000, 4000, uint64(len(subs)), 8000}
		if err := in.Function("poll_oneoff").Call(t.Context(), stack); err != nil {
			t.Fatal(err)
		}
		b, _ := mem.Read(8000, 4)
		n := binary.LittleEndian.Uint32(b)
		out, _ := mem.Read(4000, n*eventSize)
		for i := range n {
			e := out[i*eventSize:]
			events = append(events, event{binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint16(e[8:]), e[10]})
		}
		return stack[0], events
	}
	hour := uint64(time.Hour)
	begin := time.Now()
	errno, evs := poll(clock(1, 1, hour, 0), fd(2, eventFdRead, 0), fd(3, eventFdWrite, 1), fd(4, eventFdWrite, 7))
	if errno != 0 || len(evs) != 3 || evs[0] != (event{2, 0, eventFdRead}) || evs[1] != (event{3, 0, eventFdWrite}) ||
		evs[2] != (event{4, errnoBadf, eventFdWrite}) || time.Since(begin) > time.Second {
		t.Errorf("descriptors: errno %d, events %v", errno, evs)
	}
	errno, evs = poll(clock(1, 1, hour, 0), clock(2, 1, uint64(5*time.Millisecond), 0))
	if errno != 0 || len(evs) != 1 || evs[0] != (event{2, 0, eventClock}) {
		t.Errorf("two clocks: errno %d, events %v", errno, evs)
	}
	begin = time.Now()
	errno, evs = poll(clock(1, 0, uint64(time.Now().Add(10*time.Millisecond).UnixNano()), subscriptionAbstime))
	if errno != 0 || len(evs) != 1 || time.Since(begin) < 10*time.Millisecond {
		t.Errorf("absolute realtime: errno %d, events %v after %v", errno, evs, time.Since(begin))
	}
	errno, evs = poll(clock(1, clockMonotonic, 1, subscriptionAbstime), clock(2, 9, 1, 0))
	if errno != 0 || len(evs) != 2 || evs[0].errno != errnoNotsup || evs[1].errno != errnoInval {
		t.Errorf("absolute monotonic and an unknown clock: errno %d, events %v", errno, evs)
	}
	// Events laid over subscriptions not read yet.
	mem.Write(1000, cat(fd(5, eventFdWrite, 9), fd(6, eventFdRead, 0), fd(7, eventFdWrite, 2)))
	stack := []uint64{1000, 1000 + 40, 3, 8000}
	if err := in.Function("poll_oneoff").Call(t.Context(), stack); err != nil || stack[0] != 0 {
		t.Fatalf("overlapping: errno %d, %v", stack[0], err)
	}
	out, _ := mem.Read(1000+40, 3*eventSize)
	for i, want := range []event{{5, errnoBadf, eventFdWrite}, {6, 0, eventFdRead}, {7, 0, eventFdWrite}} {
		e := out[i*eventSize:]
		if got := (event{binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint16(e[8:]), e[10]}); got != want {
			t.Errorf("overlapping: event %d is %v, want %v", i, got, want)
		}
	}
	sub := fd(1, 7, 0)
	if errno, _ := poll(sub); errno != errnoInval {
		t.Errorf("unknown subscription: errno %d, want %d", errno, errnoInval)
	}
	if errno, _ := poll(); errno != errnoInval {
		t.Errorf("no subscription: errno %d, want %d", errno, errnoInval)
	}
	stack = []uint64{math.MaxUint32 - 10, 0, 1, 0}
	if err := in.Function("poll_oneoff").Call(t.Context(), stack); err != nil || stack[0] != errnoFault {
		t.Errorf("out of bounds: errno %d, %v; want %d", stack[0], err, errnoFault)
	}
}

// goGuest builds the suite's Go reactor.
func goGuest(b *testing.B) []byte {
	goBin, err := exec.LookPath("go")
	if err != nil {
		b.Skip("no Go toolchain")
	}
	dir := b.TempDir()
	src, err := os.ReadFile("../../conformance/runtimetest/testdata/goguest/main.go")
	if err != nil {
		b.Skip(err)
	}
	os.WriteFile(filepath.Join(dir, "main.go"), src, 0o600)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module goguest\n\ngo 1.24\n"), 0o600)
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", "guest.wasm", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	wasm, err := os.ReadFile(filepath.Join(dir, "guest.wasm"))
	if err != nil {
		b.Fatal(err)
	}
	return wasm
}

// BenchmarkGoGuest measures a standard Go reactor: compiling it, loading it
// from the cache, instantiating it (with _initialize) and calling an export
// that prints and calls the host.
func BenchmarkGoGuest(b *testing.B) {
	wasm := goGuest(b)
	upper := func(_ context.Context, mem runtime.Memory, stack []uint64) {
		in, _ := mem.Read(uint32(stack[0]), uint32(stack[1]))
		mem.Write(uint32(stack[2]), bytes.ToUpper(in))
		stack[0] = uint64(len(in))
	}
	cfg := runtime.Config{MemoryLimitPages: 2048, HostModule: "wasmkeep", CacheDir: b.TempDir(),
		HostFunctions: []runtime.HostFunction{{Name: "upper", Signature: runtime.Signature{
			Params: []runtime.ValueType{runtime.I32, runtime.I32, runtime.I32, runtime.I32}, Results: []runtime.ValueType{runtime.I32},
		}, Func: upper}}}
	ctx := b.Context()
	e, err := newDriver(b).NewEngine(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	// Compile is opt level speed, CompileFast opt level none (the fast tier).
	for name, be := range map[string]*backend{"Compile": e.(*engine).opt, "CompileFast": e.(*engine).fast} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				m, err := be.compile(wasm)
				if err != nil {
					b.Fatal(err)
				}
				newModule(e.(*engine), be, m).Close(ctx)
			}
		})
	}
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	<-m.(runtime.Tiered).Optimised() // fills the cache
	defer m.Close(ctx)
	b.Run("CompileCached", func(b *testing.B) {
		for b.Loop() {
			m, err := e.Compile(ctx, wasm)
			if err != nil {
				b.Fatal(err)
			}
			m.Close(ctx)
		}
	})
	b.Run("Instantiate", func(b *testing.B) {
		for b.Loop() {
			in, err := m.Instantiate(ctx, runtime.InstanceConfig{})
			if err != nil {
				b.Fatal(err)
			}
			in.Close(ctx)
		}
	})
	b.Run("Call", func(b *testing.B) {
		in, err := m.Instantiate(ctx, runtime.InstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		defer in.Close(ctx)
		f := in.Function("run")
		stack := make([]uint64, 1)
		b.ReportAllocs()
		for b.Loop() {
			stack[0] = 0
			if err := f.Call(ctx, stack); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A host function cannot call into, or close, the instance that called it.
func TestReentry(t *testing.T) {
	m := newWasmMod()
	m.importFunc("wasmkeep", "again", "", "")
	m.function("one", "", "i", 0x41, 0x01)
	var self runtime.Instance
	var callErr, closeErr error
	fns := []runtime.HostFunction{{Name: "again", Func: func(ctx context.Context, _ runtime.Memory, _ []uint64) {
		callErr = self.Function("one").Call(ctx, make([]uint64, 1))
		closeErr = self.Close(ctx)
	}}}
	_, self = start(t, runtime.Config{HostFunctions: fns}, m.bytes(), runtime.InstanceConfig{})
	callOK(t, self, "again")
	if !errors.Is(callErr, errInstanceRunning) || !errors.Is(closeErr, errInstanceRunning) {
		t.Errorf("from a host function: Call = %v, Close = %v; want errInstanceRunning", callErr, closeErr)
	}
	if got := callOK(t, self, "one")[0]; got != 1 {
		t.Errorf("one() = %d afterwards", got)
	}
}

// Guests stopped by their ctx, trapping on a fault and calling the host, on
// several goroutines at once while the Go runtime collects garbage (and
// preempts with signals): nothing crashes and each call ends as it should.
func TestConcurrentStops(t *testing.T) {
	m := newWasmMod()
	h := m.importFunc("wasmkeep", "h", "i", "i")
	m.function("spin", "", "", 0x03, 0x40, 0x0c, 0x00, 0x0b)                           // loop br 0 end
	m.function("oob", "", "", 0x41, 0x7c, 0x28, 0x02, 0x00, 0x1a)                      // i32.load at -4
	m.function("calls", "i", "", 0x02, 0x40, 0x03, 0x40, 0x20, 0x00, 0x45, 0x0d, 0x01, // n times h(n)
		0x20, 0x00, 0x10, byte(h), 0x1a, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x21, 0x00, 0x0c, 0x00, 0x0b, 0x0b)
	fns := []runtime.HostFunction{{Name: "h", Signature: runtime.Signature{
		Params: []runtime.ValueType{runtime.I32}, Results: []runtime.ValueType{runtime.I32},
	}, Func: func(_ context.Context, mem runtime.Memory, stack []uint64) {
		b, _ := mem.Read(0, 1)
		b[0]++
	}}}
	e, _ := start(t, runtime.Config{HostFunctions: fns}, m.bytes(), runtime.InstanceConfig{})
	mod, err := e.Compile(t.Context(), m.bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(t.Context())
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				goruntime.GC()
			}
		}
	}()
	deadline := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				in, err := mod.Instantiate(t.Context(), runtime.InstanceConfig{})
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 3 {
				case 0:
					ctx, cancel := context.WithTimeout(t.Context(), time.Duration(1+i%4)*time.Millisecond)
					if err := in.Function("spin").Call(ctx, nil); !errors.Is(err, runtime.ErrInterrupted) {
						t.Errorf("spin: %v", err)
					}
					cancel()
				case 1:
					if err := in.Function("oob").Call(t.Context(), nil); err == nil || errors.Is(err, runtime.ErrInterrupted) {
						t.Errorf("oob: %v", err)
					}
				case 2:
					if err := in.Function("calls").Call(t.Context(), []uint64{10000}); err != nil {
						t.Errorf("calls: %v", err)
					}
				}
				in.Close(t.Context())
			}
		})
	}
	wg.Wait()
}

// rawModule is a module made of the sections given, each an id and its
// content.
func rawModule(sections ...[]byte) []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range sections {
		out = append(append(append(out, s[0]), uleb(len(s)-1)...), s[1:]...)
	}
	return out
}

func sec(id byte, content ...byte) []byte { return append([]byte{id}, content...) }

// The engine accepts WebAssembly 2.0, as wazero does, and refuses the
// proposals beyond it.
func TestFeatures(t *testing.T) {
	e, err := newDriver(t).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	fn := func(results string, body ...byte) []byte {
		m := newWasmMod()
		m.function("f", "", results, body...)
		return m.bytes()
	}
	for name, wasm := range map[string][]byte{
		"simd":        fn("", append(append([]byte{0xfd, 0x0c}, make([]byte, 16)...), 0x1a)...), // v128.const, drop
		"multi-value": fn("ii", 0x41, 1, 0x41, 2),
		"bulk memory": fn("", 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x0b, 0x00), // memory.fill
		"references":  fn("", 0xd0, 0x70, 0x1a),                            // ref.null func, drop
	} {
		m, err := e.Compile(t.Context(), wasm)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		m.Close(t.Context())
	}
	for name, wasm := range map[string][]byte{
		"tail call":         fn("", 0x12, 0x00), // return_call 0
		"multiple memories": rawModule(sec(5, 2, 0, 1, 0, 1)),
		"64-bit memory":     rawModule(sec(5, 1, 4, 1)),
		"shared memory":     rawModule(sec(5, 1, 3, 1, 1)),
	} {
		if m, err := e.Compile(t.Context(), wasm); err == nil {
			m.Close(t.Context())
			t.Errorf("%s: compiled", name)
		}
	}
}

// tableGuest has one funcref table with the limits given and exports
// grow(delta) -> previous size or -1.
func tableGuest(limits ...byte) []byte {
	body := []byte{0, 0xd0, 0x70, 0x20, 0, 0xfc, 0x0f, 0, 0x0b} // ref.null func, local.get 0, table.grow 0
	return rawModule(
		sec(1, 1, 0x60, 1, 0x7f, 1, 0x7f),
		sec(3, 1, 0),
		sec(4, append([]byte{1, 0x70}, limits...)...),
		sec(7, 1, 4, 'g', 'r', 'o', 'w', 0, 0),
		sec(10, append([]byte{1, byte(len(body))}, body...)...))
}

// table.grow stops at wasmbounds.MaxTableElements whatever the module declares, and
// modules needing larger or more tables do not compile.
func TestTablesCapped(t *testing.T) {
	e, err := newDriver(t).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	instantiate := func(wasm []byte) (runtime.Instance, error) {
		m, err := e.Compile(t.Context(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(t.Context())
		return m.Instantiate(t.Context(), runtime.InstanceConfig{})
	}
	for name, limits := range map[string][]byte{
		"no max":        {0, 1},
		"max above cap": append([]byte{1, 1}, uleb(wasmbounds.MaxTableElements+1)...),
		"max 2^32-1":    {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		in, err := instantiate(tableGuest(limits...))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, tc := range []struct{ delta, want uint32 }{
			{math.MaxUint32 - 1, math.MaxUint32}, {wasmbounds.MaxTableElements, math.MaxUint32}, {wasmbounds.MaxTableElements - 1, 1},
		} {
			stack := []uint64{uint64(tc.delta)}
			if err := in.Function("grow").Call(t.Context(), stack); err != nil {
				t.Fatal(err)
			}
			if got := uint32(stack[0]); got != tc.want {
				t.Errorf("%s: table.grow(%d) = %d, want %d", name, tc.delta, int32(got), int32(tc.want))
			}
		}
		in.Close(t.Context())
	}
	tables := append([]byte{wasmbounds.MaxTables + 1}, bytes.Repeat([]byte{0x70, 0, 0}, wasmbounds.MaxTables+1)...)
	for name, wasm := range map[string][]byte{
		"min above cap": tableGuest(append([]byte{0}, uleb(wasmbounds.MaxTableElements+1)...)...),
		"too many":      rawModule(sec(4, tables...)),
	} {
		if m, err := e.Compile(t.Context(), wasm); err == nil {
			m.Close(t.Context())
			t.Errorf("%s: compiled", name)
		}
	}
}

// Without a "memory" export, the memory host functions see is empty (every
// range out of bounds) and Instance.Memory is nil.
func TestNoMemory(t *testing.T) {
	var size uint32 = 1
	var readable bool
	fns := []runtime.HostFunction{{Name: "probe", Func: func(_ context.Context, mem runtime.Memory, _ []uint64) {
		size = mem.Size()
		_, readable = mem.Read(0, 0)
	}}}
	body := []byte{0, 0x10, 0, 0x0b} // call 0
	wasm := rawModule(
		sec(1, 1, 0x60, 0, 0),
		sec(2, cat([]byte{1}, str("wasmkeep"), str("probe"), []byte{0, 0})...),
		sec(3, 1, 0),
		sec(7, cat([]byte{1}, str("run"), []byte{0, 1})...),
		sec(10, append([]byte{1, byte(len(body))}, body...)...))
	_, in := start(t, runtime.Config{HostFunctions: fns}, wasm, runtime.InstanceConfig{})
	callOK(t, in, "run")
	if size != 0 || readable {
		t.Errorf("host function: Size() = %d, Read(0, 0) ok = %v; want 0, false", size, readable)
	}
	if in.Memory() != nil {
		t.Errorf("Memory() = %v, want nil", in.Memory())
	}
}

// A failed background compile is logged and leaves the module at opt level
// none, where it keeps running.
func TestBackgroundCompileFails(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	e, err := newTieredDriver(t, runtime.TieringOn).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) }) // after the module's
	e.(*engine).failOptimise = errors.New("no compiler today")
	runtimetest.BackgroundCompileFails(t, e, "no compiler today", &logs)
}
