package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
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

// A custom build with buckettest's reference bucket as a plugin: the command
// passes it, and fails it (exit status 1, each broken rule named with its
// reason) once plugins.yaml makes it ignore conditions.
func TestConformanceBucketPassesAndFails(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "wasmkeep-memory")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/bucketbuild").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
		if !regexp.MustCompile(`(?m)^passed  ` + r.Name + ` `).MatchString(out) {
			t.Errorf("no line saying %s passed:\n%s", r.Name, out)
		}
	}
	if want := "17 rules: 17 passed, 0 failed"; !strings.Contains(out, want) {
		t.Errorf("no %q:\n%s", want, out)
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
		"17 rules: 7 passed, 10 failed",
		"wasmkeep: bucket plugin memory failed 10 of 17 conformance rules",
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
		if err != nil || !strings.Contains(string(out), "bucket plugin fs (bucket/v1)") || !strings.Contains(string(out), "17 rules: 17 passed, 0 failed") {
			t.Fatalf("the fs bucket: %v\n%s", err, out)
		}
		b, err := fsbucket.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if page, err := b.List(t.Context(), "", bucket.ListOptions{}); err != nil || len(page.Entries) != 0 {
			t.Errorf("left behind: %+v (%v)", page.Entries, err)
		}
	})

	// An S3-compatible store (VersityGW) as a user reaches theirs: the
	// bucket named in WASMKEEP_* variables, the endpoint and credentials in
	// the standard AWS_* ones.
	t.Run("S3", func(t *testing.T) {
		srv := s3test.Start(t)
		cmd := exec.Command(bin, "conformance", "bucket", "--quick")
		cmd.Env = append(append(withoutWasmkeepVars(), srv.Environ()...),
			"WASMKEEP_BUCKET__USE=s3", "WASMKEEP_BUCKET__S3__BUCKET="+srv.NewBucket(t))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "bucket plugin s3 (bucket/v1)") || !strings.Contains(string(out), "17 rules: 17 passed, 0 failed") {
			t.Errorf("VersityGW: %v\n%s", err, out)
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
		if err != nil || !strings.Contains(out, "bucket plugin process (bucket/v1)") || !strings.Contains(out, "17 rules: 17 passed, 0 failed") {
			t.Errorf("the fs bucket out of process: %v\n%s", err, out)
		}
	})
}
