package main

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sqlitestorage "github.com/wasmkeep/wasmkeep/plugins/storage-sqlite"
)

// What the repeatable flags set comes from the config file's node section
// or from WASMKEEP_* variables too, and so do the classes served; the
// "serving" line names the SQLite driver.
func TestSettingsWithoutFlags(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	hello := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.URL.Path) }
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer tlsSrv.Close()
	ca := write("ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})))
	hubEnv := write("hub.env", "TOKEN=from-node-env\n")
	cfg := write("plugins.yaml", fmt.Sprintf("node:\n  actors: {probe: %s}\n  outbound_ca: [%s]\n", probe(t), ca))

	url, _, logs := serveBinary(t, bin, append(os.Environ(),
		"WASMKEEP_NODE__DATA_DIR="+filepath.Join(dir, "data"),
		"WASMKEEP_NODE__ENV__PROBE="+hubEnv,
		"WASMKEEP_NODE__ALLOW_OUTBOUND=127.0.0.0/8,::1"),
		"--config", cfg)
	served := &testNode{t: t, url: url}
	get := func(path string) string {
		t.Helper()
		_, body := served.do("GET", path, "")
		return body
	}
	if got := get("/actor/probe/a/env?name=TOKEN"); got != "set from-node-env" {
		t.Errorf("node.env from a variable: %q", got)
	}
	if got := get("/actor/probe/a/fetch?url=" + plain.URL + "/x"); got != "200 hello /x" {
		t.Errorf("node.allow_outbound from a variable: %q", got)
	}
	if got := get("/actor/probe/a/fetch?url=" + tlsSrv.URL + "/y"); got != "200 hello /y" {
		t.Errorf("node.outbound_ca from the file: %q", got)
	}
	driver := os.Getenv("WASMKEEP_STORAGE__SQLITE__DRIVER")
	if driver == "" {
		driver = sqlitestorage.NewConfig().Driver // the build's default: the test is built as the binary is
	}
	if !strings.Contains(logs.String(), "storage.sqlite.driver="+driver) {
		t.Errorf("the serving line does not name the SQLite driver (%s):\n%s", driver, logs)
	}
}

// A mistake in a setting is refused at start, naming the key or the flag,
// the value and where it was given.
func TestSettingMistakesAreNamed(t *testing.T) {
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "plugins.yaml")
	for _, c := range []struct {
		yaml string
		env  []string
		args []string
		want string
	}{
		{yaml: "node:\n  idle_timeout: 30\n", want: cfg + ": node.idle_timeout: 30 has no unit: write it with one, such as 30s"},
		{yaml: "node:\n  max_instances: lots\n", want: cfg + `: node.max_instances: "lots" is not a valid int`},
		{env: []string{"WASMKEEP_NODE__MAX_INSTANCES=lots"}, want: `WASMKEEP_NODE__MAX_INSTANCES=lots: node.max_instances: "lots" is not a valid int`},
		{env: []string{"WASMKEEP_NODE__IDLE_TIMEOUT=30"}, want: `WASMKEEP_NODE__IDLE_TIMEOUT=30: node.idle_timeout: "30" is not a duration`},
		{args: []string{"--actor", "c=first.wasm", "--actor", "c=second.wasm"}, want: "--actor c=first.wasm and --actor c=second.wasm: class c given twice"},
		{yaml: "node:\n  env: {hbu: hub.env}\n", want: `node.env for class "hbu", which is not served (served: c)`},
		{yaml: "node:\n  allow_outbound: [10.0.0.0/33]\n", want: `node.allow_outbound "10.0.0.0/33": want a CIDR range`},
		{args: []string{"--actor", "c=x.wasm", "--max-instances", "-1"}, want: "node.max_instances (--max-instances) is -1: it cannot be negative"},
		{yaml: "node:\n  idle_timeout: -5s\n", want: "node.idle_timeout (--idle-timeout) is -5s: it cannot be negative"},
	} {
		args := []string{"serve", "--data-dir", filepath.Join(dir, "data")}
		if c.yaml != "" {
			if err := os.WriteFile(cfg, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", cfg)
		}
		if c.args == nil {
			c.args = []string{"--actor", "c=missing.wasm"}
		}
		cmd := exec.Command(bin, append(args, c.args...)...)
		cmd.Env = append(withoutWasmkeepVars(), c.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("config %q, env %q, flags %q: %v\n%s\nwant an error containing %q", c.yaml, c.env, c.args, err, out, c.want)
		}
	}
}
