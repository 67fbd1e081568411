package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/node"
)

func TestModuleWithUnknownImportIsRefused(t *testing.T) {
	rt, st := standardPlugins(t, "")
	bad := buildGuest(t, "cmd/wasmkeep/testdata/guests/badimport", "")
	_, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Classes: map[string]string{"bad": bad}}, rt, st)
	if err == nil || !strings.Contains(err.Error(), "wasmkeep.no_such_function") {
		t.Fatalf("got %v, want a refusal naming wasmkeep.no_such_function", err)
	}
}

// wasmkeepBinary builds the command once per test binary (every test that
// runs it runs the same code; a build costs seconds).
func wasmkeepBinary(t *testing.T) string { return buildWasmkeep(t, "") }

// buildWasmkeep builds the command with the build tags (comma-separated,
// "" for none) once per test binary, on top of any GOFLAGS gives (a -tags
// flag replaces GOFLAGS' own, which scripts/test sets to sqlite_fts5).
func buildWasmkeep(t *testing.T, tags string) string {
	t.Helper()
	name := "wasmkeep"
	args := []string{"build"}
	if tags != "" {
		name += "-" + strings.ReplaceAll(tags, ",", "-")
		for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
			if v, ok := strings.CutPrefix(strings.TrimLeft(f, "-"), "tags="); ok && v != "" {
				tags = v + "," + tags
			}
		}
		args = append(args, "-tags", tags)
	}
	bin := filepath.Join(guestDir, name)
	buildOnce(t, name, func() error {
		if out, err := exec.Command("go", append(args, "-o", bin, ".")...).CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	})
	return bin
}

// pureGoBinary is wasmkeep built with CGO_ENABLED=0 (no wasmtime, no
// mattn driver), once per test binary.
func pureGoBinary(t *testing.T) string {
	t.Helper()
	const name = "wasmkeep-nocgo"
	bin := filepath.Join(guestDir, name)
	buildOnce(t, name, func() error {
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("CGO_ENABLED=0 go build: %v\n%s", err, out)
		}
		return nil
	})
	return bin
}

func TestBadConfigKeyIsRefused(t *testing.T) {
	bin := wasmkeepBinary(t)
	cfg := filepath.Join(t.TempDir(), "plugins.yaml")
	for yaml, want := range map[string]string{
		"node:\n  listn: x\n":               "unknown key node.listn",
		"runtme:\n  use: wazero\n":          `unknown key "runtme"`,
		"runtime:\n  use: nope\n":           `unknown runtime plugin "nope"`,
		"storage:\n  sqlite:\n    drivr: x": "unknown key storage.sqlite.drivr",
	} {
		os.WriteFile(cfg, []byte(yaml), 0o600)
		cmd := exec.Command(bin, "serve", "--config", cfg, "--actor", "c=x.wasm")
		cmd.Env = withoutWasmkeepVars() // the variables would override the file under test
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("config %q: %v, %s; want an error containing %q", yaml, err, out, want)
		}
	}
	out, err := exec.Command(bin, "plugins").CombinedOutput()
	if err != nil || !regexp.MustCompile(`runtime +wazero +runtime/v2`).Match(out) || !strings.Contains(string(out), "storage/v2") {
		t.Errorf("wasmkeep plugins: %v\n%s", err, out)
	}
}

func withoutWasmkeepVars() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WASMKEEP_") {
			env = append(env, kv)
		}
	}
	return env
}

// SIGTERM: in-flight requests finish, then the process exits cleanly with
// every database closed.
func TestSIGTERMFinishesInFlightRequests(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)
	data := t.TempDir()
	url, cmd, logs := serveBinary(t, bin, nil, "--data-dir", data, "--actor", "probe="+probe(t))
	result := make(chan string, 1)
	go func() {
		resp, err := http.Post(url+"/actor/probe/a/seen?seq=7&ms=1000", "", nil)
		if err != nil {
			result <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- string(b)
	}()
	// A real server in another process, on the wall clock: the request's
	// event takes a second in the guest, so 300 ms in it is in flight.
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	if got := <-result; got != "ok 7" {
		t.Errorf("in-flight request: %q, want ok 7", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
	// A clean close checkpoints and removes the write-ahead log.
	if _, err := os.Stat(filepath.Join(data, "state", "default", "default", "actors", "default", "probe", "a.db-wal")); !os.IsNotExist(err) {
		t.Errorf("write-ahead log left after a clean stop: %v", err)
	}
}

// A CGO_ENABLED=0 build works without the cgo plugins, and asking it for one
// says that this build lacks it and how to get one that has it.
func TestPureGoBuild(t *testing.T) {
	engineNeutral(t)
	bin := pureGoBinary(t)
	out, err := exec.Command(bin, "plugins").CombinedOutput()
	if err != nil || !regexp.MustCompile(`wasmtime +runtime/v2 +not in this build: .*CGO_ENABLED=1`).Match(out) {
		t.Errorf("plugins of a pure-Go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--actor", "probe="+probe(t), "--data-dir", t.TempDir())
	cmd.Env = append(withoutWasmkeepVars(), "WASMKEEP_RUNTIME__USE=wasmtime")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `runtime plugin "wasmtime" is not in this build`) || !strings.Contains(string(out), "CGO_ENABLED=1") {
		t.Errorf("choosing wasmtime in a pure-Go build: %v\n%s", err, out)
	}
}
