package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The modules are not published: an actor, and a custom build of the
// server, outside the checkout depend on it with replace directives, as
// sdk/go/README.md and README.md say. This runs their commands in temporary
// directories outside the checkout, builds both, and serves the actor with
// the custom server.
func TestBuildsOutsideTheCheckout(t *testing.T) {
	engineNeutral(t)
	root := repoRoot(t)
	run := func(dir string, env []string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		// GOWORK=off: no go.work above the temporary directory applies.
		cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The actor: examples/visits, sdk/go/README.md's quick start.
	actor := t.TempDir()
	visits, err := os.ReadFile(filepath.Join(root, "examples/visits/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(actor, "main.go"), string(visits))
	run(actor, nil, "go", "mod", "init", "example.com/visits")
	run(actor, nil, "go", "mod", "edit",
		"-replace", "github.com/wasmkeep/wasmkeep/sdk/go="+filepath.Join(root, "sdk/go"),
		"-replace", "github.com/wasmkeep/wasmkeep/kernel/abi="+filepath.Join(root, "kernel/abi"))
	run(actor, nil, "go", "mod", "tidy")
	wasm := filepath.Join(actor, "visits.wasm")
	run(actor, []string{"GOOS=wasip1", "GOARCH=wasm"}, "go", "build", "-buildmode=c-shared", "-o", wasm, ".")

	// The custom build: README.md's, with the wazero engine and SQLite.
	server := t.TempDir()
	write(filepath.Join(server, "main.go"), customServer)
	run(server, nil, "go", "mod", "init", "example.com/myserver")
	run(server, nil, "go", "mod", "edit",
		"-replace", "github.com/wasmkeep/wasmkeep="+root,
		"-replace", "github.com/wasmkeep/wasmkeep/sdk/go="+filepath.Join(root, "sdk/go"),
		"-replace", "github.com/wasmkeep/wasmkeep/kernel/abi="+filepath.Join(root, "kernel/abi"),
		"-replace", "github.com/tetratelabs/wazero="+filepath.Join(root, "third_party/wazero"))
	run(server, nil, "go", "mod", "tidy")
	bin := filepath.Join(server, "myserver")
	run(server, nil, "go", "build", "-o", bin, ".")

	// This build has wazero only, so the variables choosing wasmtime for the
	// suite's second run are left out.
	url, _, _ := serveBinary(t, bin, withoutWasmkeepVars(), "--data-dir", t.TempDir(), "--actor", "visits="+wasm)
	served := &testNode{t: t, url: url}
	served.expect("GET", "/actor/visits/home?who=alice", "", 200, "hello alice, you are visitor number 1\n")
}

const customServer = `package main

import (
	"os"

	"github.com/wasmkeep/wasmkeep/cmd/wasmkeep/command"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

func main() { os.Exit(command.Main(wazeroruntime.Info(), sqlitestorage.Info())) }
`
