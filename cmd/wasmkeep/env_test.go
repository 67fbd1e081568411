package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

// --env values reach the actors of their class only, and never the log.
func TestEnvIsPerClass(t *testing.T) {
	const token = "tok-8d2f7c1e"
	big := strings.Repeat("v", 40<<10) // past the SDK's 16 KiB buffer: comes back pending
	n := startNode(t, node.Options{
		Classes: map[string]string{"hub": probe(t), "other": probe(t)},
		Env:     map[string]map[string]string{"hub": {"ADMIN_TOKEN": token, "EMPTY": "", "BIG": big}},
	})
	n.expect("GET", "/actor/hub/a/env?name=ADMIN_TOKEN", "", 200, "set "+token)
	n.expect("GET", "/actor/hub/b/env?name=ADMIN_TOKEN", "", 200, "set "+token)
	n.expect("GET", "/actor/hub/a/env?name=EMPTY", "", 200, "set ")
	n.expect("GET", "/actor/hub/a/env?name=BIG", "", 200, "set "+big)
	n.expect("GET", "/actor/hub/a/env?name=NOT_SET", "", 200, "unset")
	n.expect("GET", "/actor/hub/a/env?name=admin_token", "", 200, "unset")
	n.expect("GET", "/actor/other/a/env?name=ADMIN_TOKEN", "", 200, "unset")
	n.stop()
	if log := n.log.String(); strings.Contains(log, token) {
		t.Errorf("the node's log holds a value:\n%s", log)
	}
}

// Through the binary: --env for a class not served is refused, naming it; a
// malformed file is refused by file and line; a file others can read is
// accepted with a warning. The values appear in none of it.
func TestEnvFlag(t *testing.T) {
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	const secret = "s3cret-do-not-print"
	write := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return path
	}
	good := write("good.env", "TOKEN="+secret+"\n", 0o600)
	bad := write("bad.env", "# comment\n"+secret+"\n", 0o600)
	shared := write("open.env", "TOKEN="+secret+"\n", 0o644)
	run := func(env string) string {
		// The module does not exist: serving fails after the --env files are read.
		cmd := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--actor", "hub=missing.wasm", "--env", env)
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("--env %s: served", env)
		}
		if strings.Contains(string(out), secret) {
			t.Errorf("--env %s: the output holds the value:\n%s", env, out)
		}
		return string(out)
	}
	if out := run("hbu=" + good); !strings.Contains(out, `--env for class "hbu", which is not served (served: hub)`) {
		t.Errorf("--env for a class not served:\n%s", out)
	}
	if out := run("hub=" + bad); !strings.Contains(out, bad+":2: not NAME=value") {
		t.Errorf("--env with a malformed line:\n%s", out)
	}
	if out := run("hub=" + good); strings.Contains(out, "readable") || !strings.Contains(out, "missing.wasm") {
		t.Errorf("--env with a private file: want no warning, then the missing module:\n%s", out)
	}
	if out := run("hub=" + shared); !strings.Contains(out, "readable by every user") || !strings.Contains(out, "file="+shared) {
		t.Errorf("--env with a file others can read: want a warning naming it:\n%s", out)
	}
}
