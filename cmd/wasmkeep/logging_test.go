package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --log-format json writes one JSON object a line; node.log_level (from the
// file or a variable) leaves out lines below it; a value that is neither is
// refused naming the key, the flag and the valid values.
func TestLogFormatAndLevel(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	actor := "probe=" + probe(t)

	_, cmd, logs := serveBinary(t, bin, withoutWasmkeepVars(), "--actor", actor, "--data-dir", filepath.Join(dir, "a"), "--log-format", "json")
	cmd.Process.Kill()
	cmd.Wait()
	serving := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("--log-format json wrote a line that is not JSON: %v\n%s", err, line)
		}
		serving = serving || rec["msg"] == "serving" && rec["level"] == "INFO"
	}
	if !serving {
		t.Errorf("--log-format json: no serving line at INFO:\n%s", logs)
	}

	cfg := filepath.Join(dir, "plugins.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  log_level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		env     []string
		args    []string
		serving bool // whether the info line "serving" is written
	}{
		{name: "node.log_level: warn in the file"},
		{name: "WASMKEEP_NODE__LOG_LEVEL=info over the file", env: []string{"WASMKEEP_NODE__LOG_LEVEL=info"}, serving: true},
		{name: "--log-level error over the variable", env: []string{"WASMKEEP_NODE__LOG_LEVEL=info"}, args: []string{"--log-level", "error"}},
	} {
		args := append([]string{"--actor", actor, "--data-dir", filepath.Join(dir, "b"), "--config", cfg}, c.args...)
		_, cmd, logs := serveBinary(t, bin, append(withoutWasmkeepVars(), c.env...), args...)
		cmd.Process.Kill()
		cmd.Wait()
		if got := strings.Contains(logs.String(), "msg=serving"); got != c.serving {
			t.Errorf("%s: serving line written %v, want %v:\n%s", c.name, got, c.serving, logs)
		}
	}

	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"--log-format", "xml"}, want: `node.log_format (--log-format) is "xml": want text, json`},
		{args: []string{"--log-level", "verbose"}, want: `node.log_level (--log-level) is "verbose": want debug, info, warn, error`},
		{env: []string{"WASMKEEP_NODE__LOG_FORMAT=logfmt"}, want: `WASMKEEP_NODE__LOG_FORMAT=logfmt: node.log_format (--log-format) is "logfmt": want text, json`},
	} {
		refused(t, bin, c.env, append([]string{"--actor", actor, "--data-dir", filepath.Join(dir, "c")}, c.args...), c.want)
	}
}
