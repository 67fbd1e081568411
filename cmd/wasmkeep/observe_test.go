package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// The metrics listener's page has Go's and the process's collectors and
// wasmkeep_build_info naming the build and the plugins in use; with
// --pprof it serves Go's profiler under /debug/pprof/ too, never on the
// public listener; without it that path is the page. --pprof without
// --metrics-listen is refused, naming both (issue 29).
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
	url, _, _ := serveBinary(t, bin, withoutWasmkeepVars(), "--data-dir", t.TempDir(), "--actor", "probe="+probe(t),
		"--metrics-listen", metricsAddr, "--pprof")
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
	refused(t, bin, nil, []string{"--data-dir", t.TempDir(), "--actor", "probe=" + probe(t), "--pprof"},
		"node.pprof (--pprof) needs node.metrics_listen (--metrics-listen)")
}
