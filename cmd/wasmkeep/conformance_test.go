package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/conformance/transporttest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-s3/s3test"
)

// runConformance runs `bin conformance bucket args...` with a plugins.yaml
// holding yaml, without the caller's WASMKEEP_* variables.
func runConformance(t *testing.T, bin, yaml string, args ...string) (string, error) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "plugins.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"conformance", "bucket", "--config", cfg}, args...)...)
	cmd.Env = withoutWasmkeepVars()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bucketBuild builds testdata/bucketbuild, once per test binary.
func bucketBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(guestDir, "wasmkeep-memory")
	buildOnce(t, "wasmkeep-memory", func() error {
		if out, err := exec.Command("go", "build", "-o", bin, "./testdata/bucketbuild").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
		return nil
	})
	return bin
}

// `wasmkeep conformance transport` passes transport-mtls, every rule, and
// fails (exit status 1, the broken rules named) a transport plugin that does
// not authenticate: the kernel's plaintext one, in a custom build.
func TestConformanceTransport(t *testing.T) {
	engineNeutral(t)
	run := func(bin, yaml string) (string, error) {
		cfg := filepath.Join(t.TempDir(), "plugins.yaml")
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "conformance", "transport", "--config", cfg, "--rounds", "5")
		cmd.Env = withoutWasmkeepVars()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	rules := transporttest.Rules()
	out, err := run(wasmkeepBinary(t), "")
	if err != nil || !strings.Contains(out, "transport plugin mtls (transport/v1)") ||
		!strings.Contains(out, fmt.Sprintf("%d rules: %d passed, 0 failed", len(rules), len(rules))) {
		t.Fatalf("conformance transport on mtls: %v\n%s", err, out)
	}
	for _, r := range rules {
		if !regexp.MustCompile(`(?m)^passed +` + r.Name + ` `).MatchString(out) {
			t.Errorf("no line for %s passed:\n%s", r.Name, out)
		}
	}

	out, err = run(bucketBuild(t), "transport: {use: plain}\n")
	if exitCode(err) != 1 || !regexp.MustCompile(`(?m)^FAILED +PeerOf +.*want a non-empty`).MatchString(out) ||
		!strings.Contains(out, "transport plugin plain failed") {
		t.Errorf("conformance transport on plaintext: %v\n%s", err, out)
	}
}

// A custom build with buckettest's reference bucket as a plugin: the command
// passes it, and fails it (exit status 1, each broken rule named with its
// reason) once plugins.yaml makes it ignore conditions.
func TestConformanceBucketPassesAndFails(t *testing.T) {
	engineNeutral(t)
	bin := bucketBuild(t)
	// The build lacks bucket-fs, which the embedded defaults choose: it
	// serves on those defaults, and the command that needs a bucket says
	// that the default does not apply and which buckets the build has.
	url, _, _ := serveBinary(t, bin, withoutWasmkeepVars(), "--data-dir", t.TempDir(), "--actor", "probe="+probe(t))
	if resp, err := http.Get(url + "/actor/probe/a/hits"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a build without bucket-fs serving: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	out, err := runConformance(t, bin, "")
	if want := `no bucket plugin chosen (set bucket.use); the embedded default, bucket.use: fs, does not apply: unknown bucket plugin "fs" (this build has: memory)`; exitCode(err) != 1 || !strings.Contains(out, want) {
		t.Errorf("conformance bucket on the defaults of a build without fs: %v\n%s\nwant %q", err, out, want)
	}

	rules := buckettest.Rules()
	out, err = runConformance(t, bin, "bucket: {use: memory}\n", "--quick", "--prefix", "mine/")
	if err != nil {
		t.Fatalf("an honest bucket: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`bucket plugin memory \(bucket/v1\), writing under mine/\d{8}T\d{6}-[0-9a-f]{12}/`).MatchString(out) {
		t.Errorf("no header naming the plugin and the prefix:\n%s", out)
	}
	for _, r := range rules {
		status := "passed"
		if r.Capability {
			status = "has   "
		}
		if !regexp.MustCompile(`(?m)^` + status + `  ` + r.Name + ` `).MatchString(out) {
			t.Errorf("no line saying %s %s:\n%s", r.Name, status, out)
		}
	}
	// --quick describes its own sizes, not the defaults (issue 12).
	for _, want := range []string{"18 rules: 18 passed, 0 failed\n2 capabilities: 2 present\n", "whole and ranged (4 MiB)\n",
		"(300 keys)\n", "every round (4 writers, 3 rounds)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "64 MiB") {
		t.Errorf("--quick names the default 64 MiB:\n%s", out)
	}

	// A store like MinIO (issue 12): its DELETE ignores If-Match and its
	// listing walks directories. It conforms; the two capabilities it
	// lacks are named, with why WasmKeep does without them.
	out, err = runConformance(t, bin, "bucket:\n  use: memory\n  memory: {ignore_delete_if_version: true, list_by_directory: true}\n", "--quick", "--large-size", "1000")
	if err != nil {
		t.Fatalf("a bucket lacking both capabilities: %v\n%s", err, out)
	}
	for _, want := range []string{
		"lacks   ConditionalDelete ",
		"at a stale version succeeded, want bucket: precondition failed (WasmKeep does not need it: the kernel never deletes conditionally",
		"lacks   ListByteOrder ",
		"(WasmKeep does not need it: the kernel never relies on the order of keys that first differ at a /)",
		"passed  ListPages ",
		"whole and ranged (1000 bytes)\n",
		"18 rules: 18 passed, 0 failed\n2 capabilities: 0 present, lacking ConditionalDelete and ListByteOrder, which WasmKeep does not need\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}

	out, err = runConformance(t, bin, "bucket:\n  use: memory\n  memory: {ignore_conditions: true}\n", "--writers", "3", "--rounds", "2", "--list-keys", "50", "--large-size", "1000")
	if exitCode(err) != 1 {
		t.Fatalf("a bucket ignoring conditions: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{
		"FAILED  CreateIfAbsent ",
		"a create over buckettest/",
		"FAILED  RaceCreate ",
		"round 0: 3 of 3 writers",
		"passed  ListPages ",
		"lacks   ConditionalDelete ",
		"18 rules: 9 passed, 9 failed\n2 capabilities: 1 present, lacking ConditionalDelete, which WasmKeep does not need\n",
		"wasmkeep: bucket plugin memory failed 9 of 18 conformance rules",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
}

// exitCode is an exec error's exit status.
func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// The standard build (one binary for the subtests: linking it is most of
// their time).
func TestConformanceBucketStandard(t *testing.T) {
	engineNeutral(t)
	bin := wasmkeepBinary(t)

	// A bucket it lacks, or none chosen, is an error that says so, before
	// anything is written.
	t.Run("Refusals", func(t *testing.T) {
		for yaml, want := range map[string]string{
			"bucket: {use: ''}\n":  "no bucket plugin chosen (set bucket.use)",
			"bucket: {use: s4}\n":  `bucket plugin "s4"`,
			"bucket: {nope: {}}\n": `bucket.nope`,
		} {
			out, err := runConformance(t, bin, yaml)
			if err == nil || !strings.Contains(out, want) {
				t.Errorf("config %q: %v, %s; want an error containing %q", yaml, err, out, want)
			}
		}
	})

	// The embedded default bucket (fs), its directory set from the
	// environment as WASMKEEP_* variables layer over the file: every rule
	// passes, and the run leaves no object behind.
	t.Run("FS", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(bin, "conformance", "bucket", "--quick")
		cmd.Env = append(withoutWasmkeepVars(), "WASMKEEP_BUCKET__FS__DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "bucket plugin fs (bucket/v1)") || !strings.Contains(string(out), "18 rules: 18 passed, 0 failed") {
			t.Fatalf("the fs bucket: %v\n%s", err, out)
		}
		b := fileBucket(t, dir)
		if page, err := b.List(t.Context(), "", bucket.ListOptions{}); err != nil || len(page.Entries) != 0 {
			t.Errorf("left behind: %+v (%v)", page.Entries, err)
		}
	})

	// An S3-compatible store (VersityGW) as a user reaches theirs: the
	// bucket named by --bucket, as every other bucket command takes it
	// (issue 29), the endpoint and credentials in the standard AWS_* ones.
	t.Run("S3", func(t *testing.T) {
		srv := s3test.Start(t)
		cmd := exec.Command(bin, "conformance", "bucket", "--quick", "--bucket", "s3://"+srv.NewBucket(t))
		cmd.Env = append(withoutWasmkeepVars(), srv.Environ()...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "bucket plugin s3 (bucket/v1)") || !strings.Contains(string(out), "18 rules: 18 passed, 0 failed") {
			t.Errorf("VersityGW: %v\n%s", err, out)
		}
	})

	// A bucket that does not exist, and an endpoint where nothing listens:
	// the cause is said once and no rule runs (issue 12: a missing bucket
	// printed the same failure for each of the 18 rules).
	t.Run("S3Unusable", func(t *testing.T) {
		srv := s3test.Start(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		for name, c := range map[string]struct{ endpoint, bucket, says string }{
			"MissingBucket": {srv.Endpoint, "wasmkeep-no-such-bucket", "the bucket does not exist"},
			"ClosedPort":    {closed, srv.NewBucket(t), "connection refused"},
		} {
			t.Run(name, func(t *testing.T) {
				cmd := exec.Command(bin, "conformance", "bucket", "--quick")
				cmd.Env = append(append(withoutWasmkeepVars(), srv.Environ()...), "WASMKEEP_BUCKET__USE=s3",
					"WASMKEEP_BUCKET__S3__BUCKET="+c.bucket, "WASMKEEP_BUCKET__S3__ENDPOINT="+c.endpoint)
				out, err := cmd.CombinedOutput()
				if exitCode(err) != 1 || strings.Count(string(out), c.says) != 1 || regexp.MustCompile(`(?m)^(passed|FAILED) `).Match(out) ||
					!strings.Contains(string(out), "the bucket cannot be used, so no further rule was run: List buckettest/") ||
					!strings.Contains(string(out), "(after 0 of 20 checks)") {
					t.Errorf("%v, want exit status 1, %q said once and no rule run:\n%s", err, c.says, out)
				}
			})
		}
	})

	// An out-of-process provider: the fs bucket served by
	// cmd/wasmkeep-bucket-fs through the process plugin.
	t.Run("Process", func(t *testing.T) {
		provider := filepath.Join(t.TempDir(), "wasmkeep-bucket-fs")
		if out, err := exec.Command("go", "build", "-o", provider, "../wasmkeep-bucket-fs").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		yaml := "bucket:\n  use: process\n  process:\n    path: " + provider + "\n    settings: {dir: " + t.TempDir() + "}\n"
		out, err := runConformance(t, bin, yaml, "--quick")
		if err != nil || !strings.Contains(out, "bucket plugin process (bucket/v1)") || !strings.Contains(out, "18 rules: 18 passed, 0 failed") {
			t.Errorf("the fs bucket out of process: %v\n%s", err, out)
		}
	})
}
