package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The metrics listener's page has Go's and the process's collectors and
// wasmkeep_build_info naming the build and the plugins in use; with
// --pprof it serves Go's profiler under /debug/pprof/ too, never on the
// public listener. --pprof without --metrics-listen is refused, naming
// both. --access-log logs a line a request with its actor, status and
// duration, a WebSocket's upgrade (101) too, which still works through it.
// Under systemd (NOTIFY_SOCKET) the node says READY=1 once ready and
// STOPPING=1 as it stops, for a Type=notify unit (issue 29).
func TestMetricsPageAndProfiler(t *testing.T) {
	engineNeutral(t)
	t.Parallel()
	bin := wasmkeepBinary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	said := func() string {
		t.Helper()
		notify.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 256)
		n, err := notify.Read(buf)
		if err != nil {
			t.Fatalf("nothing on NOTIFY_SOCKET: %v", err)
		}
		return string(buf[:n])
	}
	url, cmd, logs := serveBinary(t, bin, append(withoutWasmkeepVars(), "NOTIFY_SOCKET="+notify.LocalAddr().String()), "--data-dir", t.TempDir(), "--actor", "probe="+probe(t),
		"--actor", "room="+room(t), "--metrics-listen", metricsAddr, "--pprof", "--access-log")
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	_, page := get("http://" + metricsAddr + "/metrics")
	for _, want := range []string{`(?m)^go_goroutines \d+`, `(?m)^process_open_fds \d+`, `(?m)^process_resident_memory_bytes \S+`,
		`(?m)^wasmkeep_build_info\{commit="[^"]*",goversion="go1\.[^"]+",runtime="(wazero|wasmtime)",storage="sqlite",version="[^"]+"\} 1$`} {
		if !regexp.MustCompile(want).MatchString(page) {
			t.Errorf("the metrics page has no line matching %s", want)
		}
	}
	if code, body := get("http://" + metricsAddr + "/debug/pprof/cmdline"); code != 200 || !strings.Contains(body, "--pprof") {
		t.Errorf("pprof's cmdline on the metrics listener: %d %.200q, want the command line", code, body)
	}
	if code, body := get(url + "/debug/pprof/cmdline"); strings.Contains(body, "--pprof") {
		t.Errorf("the public listener served the profiler: %d %.200q", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/actor/room/lobby/", nil)
	if err != nil {
		t.Fatalf("a socket through the access log: %v\n%s", err, logs)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	if code, body := get(url + "/actor/probe/x/echo"); code != 200 {
		t.Fatalf("probe/x: %d %q", code, body)
	}
	waitFor(t, 10*time.Second, "the access log's lines", func() bool {
		return regexp.MustCompile(`msg=request method=GET path=/actor/probe/x/echo status=200 bytes=\d+ duration=\S+ remote=127\.0\.0\.1:\d+ actor=probe/x`).MatchString(logs.String()) &&
			regexp.MustCompile(`msg=request method=GET path=/actor/room/lobby/ status=101 .* actor=room/lobby`).MatchString(logs.String())
	})
	if got := said(); got != "READY=1" {
		t.Errorf("NOTIFY_SOCKET got %q first, want READY=1", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if got := said(); got != "STOPPING=1" {
		t.Errorf("NOTIFY_SOCKET got %q as the node stopped, want STOPPING=1", got)
	}
	refused(t, bin, nil, []string{"--data-dir", t.TempDir(), "--actor", "probe=" + probe(t), "--pprof"},
		"node.pprof (--pprof) needs node.metrics_listen (--metrics-listen)")
}
