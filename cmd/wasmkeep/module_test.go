package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
)

// bothEngines returns the runtime plugins a test must agree on, skipping the
// test in a build without cgo, which has no wasmtime.
func bothEngines(t *testing.T) []string {
	t.Helper()
	for _, in := range plugins() {
		if in.Kind == plugin.Runtime && in.Name == "wasmtime" && in.Unavailable != "" {
			t.Skip("this test binary was built without cgo, so it has no wasmtime: " + in.Unavailable)
		}
	}
	return []string{"wazero", "wasmtime"}
}

// loadError starts a node on engine serving module as class "bad" and
// returns how long it took to refuse and why, failing the test if it
// started.
func loadError(t *testing.T, engine, module string) (time.Duration, error) {
	t.Helper()
	rt, st := standardPlugins(t, engine)
	start := time.Now()
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Classes: map[string]string{"bad": module}}, rt, st)
	took := time.Since(start)
	if err == nil {
		n.Close()
		t.Fatalf("%s: a node serving %s started, want it refused", engine, module)
	}
	return took, err
}

// A module importing a WASI function with the wrong signature is refused at
// load on both engines, naming the import and both signatures, instead of
// failing every request.
func TestModuleWithWrongWASISignatureIsRefused(t *testing.T) {
	bad := buildGuest(t, "cmd/wasmkeep/testdata/guests/badwasi", "")
	for _, engine := range bothEngines(t) {
		_, err := loadError(t, engine, bad)
		want := "module imports wasi_snapshot_preview1.proc_raise with type (i64) -> (i32), but WASI preview 1 defines it as (i32) -> (i32)"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v\nwant an error naming %s and containing %q", engine, err, bad, want)
		}
	}
}

// wasmModule is a module of one type () -> () and one function of that
// type with body (its end included).
func wasmModule(body []byte) []byte {
	code := append(uleb(uint32(len(body)+2)), 0) // size (no locals, body, end), no locals
	code = append(append(code, body...), 0x0b)
	codeSection := append([]byte{1}, code...) // one body
	wasm := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	wasm = append(wasm, 1, 4, 1, 0x60, 0, 0) // type section: () -> ()
	wasm = append(wasm, 3, 2, 1, 0)          // function section: one of type 0
	wasm = append(append(wasm, 10), uleb(uint32(len(codeSection)))...)
	return append(wasm, codeSection...)
}

func uleb(v uint32) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// loadRefusal is a module file that a node refuses at load, and what its
// error says.
type loadRefusal struct {
	file string
	wasm []byte
	want string
}

// wantRefusedAtLoad writes each module to a file and loads it on both
// engines: each is refused within 10 s, the error naming the file and
// containing want.
func wantRefusedAtLoad(t *testing.T, cases []loadRefusal) {
	t.Helper()
	dir := t.TempDir()
	for _, tc := range cases {
		path := filepath.Join(dir, tc.file)
		if err := os.WriteFile(path, tc.wasm, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, engine := range bothEngines(t) {
			took, err := loadError(t, engine, path)
			if !strings.Contains(err.Error(), "compiling "+path+": "+engine+": "+tc.want) || took > 10*time.Second {
				t.Errorf("%s, %s: refused in %v with %v\nwant within 10 s an error naming the file and containing %q", engine, tc.file, took, err, tc.want)
			}
		}
	}
}

// Modules whose compilation would hold a node for minutes or take
// gigabytes are refused promptly on both engines, with the same message
// naming the module file, the bound and its limit: 100,000 nested blocks
// (76 to 107 s on wazero) and one function of 22 MB (1.38 GB), past the
// bounds on code and on a function's size.
// Bytes that are not a module get the same clear message on both.
func TestUnboundedCompilationIsRefused(t *testing.T) {
	const nested = 100000
	wantRefusedAtLoad(t, []loadRefusal{
		{"nested.wasm", wasmModule(append(bytes.Repeat([]byte{0x02, 0x40}, nested), bytes.Repeat([]byte{0x0b}, nested)...)),
			"compile: code section: function 0: more than 16384 blocks (a loop counts 4; block, if and else one each)"},
		{"big.wasm", wasmModule(bytes.Repeat([]byte{0x01}, 22<<20)), // nop
			"compile: code section: 23068679 bytes of code, at most 16777216 allowed"},
		{"function.wasm", wasmModule(bytes.Repeat([]byte{0x01}, 2<<20)),
			"compile: code section: function 0 takes 2097154 bytes, at most 1048576 allowed"},
		{"text.wasm", []byte("hello, world\n"),
			"compile: not a WebAssembly 1.0 binary module (bad magic number or version)"},
	})
}

// A module no instance of which could be made is refused at load on both
// engines, naming the bound and its limit, rather than failing each event
// when it is instantiated (issue 24, item 10: with RUST_BACKTRACE=1, Wasmtime
// answered 500 "actor exceeded its CPU budget" after 1.8 s, logging
// nothing): a memory whose minimum is above the node's memory limit (128 MiB
// by default), or a table larger than an instance may have.
func TestModuleOverInstanceLimitsIsRefused(t *testing.T) {
	t.Setenv("RUST_BACKTRACE", "1")
	module := func(id byte, payload ...byte) []byte {
		return append([]byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00, id, byte(len(payload))}, payload...)
	}
	wantRefusedAtLoad(t, []loadRefusal{
		{"memory.wasm", module(5, append([]byte{1, 0}, uleb(3000)...)...), // a memory of at least 3000 pages
			"compile: memory section: memory 0: a minimum of 3000 pages (187.5 MiB), above the memory limit of 2048 pages (128 MiB)"},
		{"table.wasm", module(4, append([]byte{1, 0x70, 0}, uleb(1<<20+1)...)...), // a funcref table of at least 2^20+1
			"compile: table section: table 0: a minimum of 1048577 elements, at most 1048576 allowed"},
	})
}
