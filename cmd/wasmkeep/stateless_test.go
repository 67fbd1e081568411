package main

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func site(t testing.TB) string { return buildGuest(t, "cmd/wasmkeep/testdata/guests/site", "") }

func TestStatelessComponent(t *testing.T) {
	n := startNode(t, node.Options{Stateless: site(t), Classes: map[string]string{"probe": probe(t)}})
	// Every path outside /actor/ and /_wasmkeep/, as received, without
	// the host's x-wasmkeep-* headers.
	code, body, _ := n.doH("POST", "/shop/a%2Fb?x=1&y", "", http.Header{"X-Wasmkeep-Caller": {"default/probe/a"}, "X-Other": {"1"}})
	if code != 200 || body != "POST /shop/a%2Fb?x=1&y [X-Other]" {
		t.Errorf("got %d %q", code, body)
	}
	n.expect("GET", "/", "", 200, "GET / []")
	n.expect("GET", "/actor", "", 200, "GET /actor []")
	n.expect("GET", "/actor/probe/a/hits", "", 200, "1")
	n.expect("GET", "/actor/nope/a", "", 404, "unknown class \"nope\"\n")
	n.expect("GET", "/_wasmkeep/health", "", 200, "ok\n")
	n.expect("GET", "/_wasmkeep/other", "", 404, "404 page not found\n")
	for range 3 { // a fresh instance every time
		n.expect("GET", "/count", "", 200, "1")
	}
	n.expect("GET", "/sql", "", 200, "not-allowed: the stateless component has no database")
	n.expect("GET", "/call", "", 200, "call failed: the stateless component has no actors.call: it reaches actors over HTTP")
	n.expect("GET", "/alarm", "", 500, "actor failed\n")
	n.expect("GET", "/log", "", 200, "")
	if log := n.log.String(); !regexp.MustCompile(`hello from the site.* actor=stateless `).MatchString(log) {
		t.Errorf("guest output not logged as actor=stateless:\n%s", log)
	}
	n.expect("POST", "/big", strings.Repeat("x", 16<<20+1), 413, "request body too large\n")

	// Its requests are counted apart from actors' events: the one actor
	// above woke once, and no stateless request counts as a wake, a
	// hibernation or an instantiation (issue 12, item 10).
	for series, want := range map[string]float64{
		`wasmkeep_stateless_requests_total{outcome="ok"}`:     9,
		`wasmkeep_stateless_requests_total{outcome="failed"}`: 1,
		`wasmkeep_stateless_request_duration_seconds_count`:   10,
		`wasmkeep_wakes_total`:                                1,
		`wasmkeep_instantiate_seconds_count`:                  1,
		`wasmkeep_hibernations_total`:                         0,
	} {
		if got := n.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if page := n.metricsPage(); strings.Contains(page, "stateless\"") {
		t.Errorf("a series labelled with the stateless component as a class:\n%s", page)
	}
}

// The CPU budget stops a request that spins; the others, running beside
// it, are answered.
func TestStatelessCPUBudget(t *testing.T) {
	n := startNode(t, node.Options{Stateless: site(t)})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if i%2 == 0 {
				n.expect("GET", "/spin", "", 500, "actor exceeded its CPU budget\n")
			} else {
				n.expect("GET", "/count", "", 200, "1")
			}
		})
	}
	wg.Wait()
	n.expect("GET", "/count", "", 200, "1")
}

func TestStatelessUnknownImportIsRefused(t *testing.T) {
	rt, st := standardPlugins(t, "")
	bad := buildGuest(t, "cmd/wasmkeep/testdata/guests/badimport", "")
	_, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Stateless: bad}, rt, st)
	if err == nil || !strings.Contains(err.Error(), "stateless component") || !strings.Contains(err.Error(), "wasmkeep.no_such_function") {
		t.Fatalf("got %v, want a refusal naming the stateless component and wasmkeep.no_such_function", err)
	}
}

// wasmkeep serve site.wasm --actor ...: the positional argument is the
// stateless component.
func TestServeStatelessArgument(t *testing.T) {
	bin := wasmkeepBinary(t)
	url, _, _ := serveBinary(t, bin, nil, site(t), "--data-dir", t.TempDir(), "--actor", "probe="+probe(t))
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for path, want := range map[string]string{"/hello": "GET /hello []", "/actor/probe/a/hits": "1"} {
		if code, body := get(path); code != 200 || body != want {
			t.Errorf("%s: got %d %q, want %q", path, code, body, want)
		}
	}
	out, err := exec.Command(bin, "serve", "a.wasm", "b.wasm").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "accepts at most 1 arg") {
		t.Errorf("two positional arguments: %v\n%s", err, out)
	}
}
