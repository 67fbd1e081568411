package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/wasmkeep/wasmkeep"
	"github.com/wasmkeep/wasmkeep/kernel/config"
)

// A limit set in the file, in a WASMKEEP_* variable or by a flag moves:
// each is set tiny here and a request just past it is refused (and a flag
// wins over the variable).
func TestLimitsFromEachSource(t *testing.T) {
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	hello := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	defer hello.Close()
	cfg := filepath.Join(dir, "plugins.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  max_header_fields: 12\n  websocket_max_message_bytes: 10\n  allow_outbound: [127.0.0.0/8]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _, _ := serveBinary(t, bin, append(withoutWasmkeepVars(), "WASMKEEP_NODE__MAX_BODY_BYTES=10", "WASMKEEP_NODE__WEBSOCKET_QUEUE_BYTES=1000"),
		"--config", cfg, "--actor", "probe="+probe(t), "--actor", "room="+room(t), "--data-dir", filepath.Join(dir, "a"),
		"--fetch-max-body-bytes", "4")
	tn := &testNode{t: t, url: url}

	// node.max_header_fields: 12 in the file (a WebSocket handshake has
	// fewer).
	if code, body := rawGet(t, tn, "/actor/probe/a/echo", 12, 300); code != 200 {
		t.Errorf("12 header fields with max_header_fields 12: %d %s", code, body)
	}
	if code, body := rawGet(t, tn, "/actor/probe/a/echo", 13, 300); code != 431 || !strings.Contains(body, "at most 12 reach an actor") {
		t.Errorf("13 header fields with max_header_fields 12: %d %s, want 431", code, body)
	}
	// WASMKEEP_NODE__MAX_BODY_BYTES=10.
	tn.expect("POST", "/actor/probe/a/echo", "0123456789", 200, "POST /echo? 10")
	if code, body := tn.do("POST", "/actor/probe/a/echo", "0123456789a"); code != 413 {
		t.Errorf("11 bytes of body with WASMKEEP_NODE__MAX_BODY_BYTES=10: %d %s, want 413", code, body)
	}
	// WASMKEEP_NODE__WEBSOCKET_QUEUE_BYTES=1000: the room's 64 KiB
	// messages never fit (4 MiB would take them).
	c := dial(t, tn, "/actor/room/r/")
	readText(t, c)
	write(t, c, "flood 3")
	if got := readText(t, c); got != "refused 3" {
		t.Errorf("3 sends of 64 KiB with WASMKEEP_NODE__WEBSOCKET_QUEUE_BYTES=1000: %q, want refused 3", got)
	}
	// node.websocket_max_message_bytes: 10 in the file.
	write(t, c, "0123456789")
	if got := readText(t, c); got != "0123456789" {
		t.Errorf("a message of 10 bytes with websocket_max_message_bytes 10: %q", got)
	}
	write(t, c, "0123456789a")
	expectClose(t, c, websocket.StatusMessageTooBig, "")

	// --fetch-max-body-bytes 4: "hello" is 5.
	tn.expect("GET", "/actor/probe/a/fetch?url="+hello.URL, "", 200, "fetch-error too-large: the response body is larger than the 4 bytes limit")

	// --max-body-bytes wins over WASMKEEP_NODE__MAX_BODY_BYTES.
	url, _, _ = serveBinary(t, bin, append(withoutWasmkeepVars(), "WASMKEEP_NODE__MAX_BODY_BYTES=10"),
		"--actor", "probe="+probe(t), "--data-dir", filepath.Join(dir, "b"), "--max-body-bytes", "11")
	(&testNode{t: t, url: url}).expect("POST", "/actor/probe/a/echo", "0123456789a", 200, "POST /echo? 11")
}

// serve --help shows each node setting's flag with its key and its real
// default, the embedded plugins.yaml's value (only metrics_listen is off,
// empty, by default, and cache_dir's default is found at start: the help
// says where).
func TestHelpShowsDefaults(t *testing.T) {
	out, err := exec.Command(wasmkeepBinary(t), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, out)
	}
	defaults, err := config.NodeDefaults(wasmkeep.DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	for key, field := range config.NodeFields(&defaults) {
		line := regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(config.FlagName(key)) + ` \S+ .*$`).Find(out)
		if line == nil {
			t.Errorf("no --%s in serve --help:\n%s", config.FlagName(key), out)
			continue
		}
		if !strings.Contains(string(line), "(node."+key+")") {
			t.Errorf("--%s does not name node.%s: %s", config.FlagName(key), key, line)
		}
		if key == "metrics_listen" || key == "cache_dir" {
			continue
		}
		var want string
		switch p := field.Ptr.(type) {
		case *string:
			want = fmt.Sprintf("(default %q)", *p)
		case **int:
			if *p == nil { // a default derived at start (failover_wait_secs): the help says how
				continue
			}
			want = fmt.Sprintf("(default %d)", **p)
		default:
			want = fmt.Sprintf("(default %v)", reflect.ValueOf(p).Elem().Interface())
		}
		if !strings.HasSuffix(string(line), want) {
			t.Errorf("--%s: want %s: %s", config.FlagName(key), want, line)
		}
	}
	for _, want := range []string{"(default 16777216)", "(default 1024)", "(default 25s)", `(default "text")`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("serve --help lacks %s", want)
		}
	}
}

// A limit that is out of range is refused at start, naming the key, the
// flag, the value and the range, and where it came from.
func TestLimitMistakesAreNamed(t *testing.T) {
	bin := wasmkeepBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "plugins.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  memory_limit_mib: 5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"--websocket-queue-messages", "-1"}, want: "node.websocket_queue_messages (--websocket-queue-messages) is -1: it cannot be negative"},
		{args: []string{"--config", cfg}, want: cfg + ": node.memory_limit_mib (--memory-limit-mib) is 5000: it can be at most 4095"},
		{env: []string{"WASMKEEP_NODE__FETCH_STEP_TIMEOUT=90s"}, want: "WASMKEEP_NODE__FETCH_STEP_TIMEOUT=90s: node.fetch_step_timeout (--fetch-step-timeout) is 1m30s: it can be at most node.fetch_max_step_timeout (--fetch-max-step-timeout), 1m0s"},
		{env: []string{"WASMKEEP_NODE__SQL_CPU_BUDGET_MS=lots"}, want: `WASMKEEP_NODE__SQL_CPU_BUDGET_MS=lots: node.sql_cpu_budget_ms: "lots" is not a valid int`},
		{args: []string{"--wall-clock", "5"}, want: `invalid argument "5" for "--wall-clock" flag`},
	} {
		refused(t, bin, c.env, append([]string{"--actor", "c=missing.wasm", "--data-dir", filepath.Join(dir, "data")}, c.args...), c.want)
	}
}

// refused runs serve with args and WASMKEEP_* variables env only, and
// checks that it exits with an error containing want.
func refused(t *testing.T, bin string, env, args []string, want string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Env = append(withoutWasmkeepVars(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("env %q, flags %q: %v\n%s\nwant an error containing %q", env, args, err, out, want)
	}
}
