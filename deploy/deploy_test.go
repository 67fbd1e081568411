// Package deploy holds the files operators run WasmKeep with (the image's
// Dockerfile is at the repository's root); its tests check each with the
// tool that reads it, skipping, with a message, a tool this machine lacks.
// ./scripts/test installs them. TestDashboardAndAlertsUseTheMetricsPage
// (cmd/wasmkeep) checks the dashboard and the rules against a real node.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
)

// tool finds a checking tool, or skips the test saying how to get it.
func tool(t *testing.T, name, install string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath, _ := exec.Command("go", "env", "GOPATH").Output()
	if p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", name); fileExists(p) {
		return p
	}
	t.Skipf("%s not found (%s; ./scripts/test installs it): not checked", name, install)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The unit passes systemd-analyze verify without a word (it warns, and
// exits 0, on a key it cannot parse). The unit's binary must exist for the
// check: a copy of the unit runs a stand-in.
func TestSystemdUnit(t *testing.T) {
	analyze := tool(t, "systemd-analyze", "apt-get install systemd")
	unit, err := os.ReadFile("systemd/wasmkeep.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "wasmkeep")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "wasmkeep.service")
	if err := os.WriteFile(copied, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/wasmkeep", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, analyze, "verify", copied); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
	// The server tells systemd when it is ready (sd_notify; a test in
	// cmd/wasmkeep). A clean stop takes up to about 29 s.
	for _, line := range []string{"Type=notify", "TimeoutStopSec=30", "LimitNOFILE=65536", "Restart=on-failure"} {
		if !regexp.MustCompile(`(?m)^` + line + `$`).Match(unit) {
			t.Errorf("the unit lacks %s", line)
		}
	}
	if regexp.MustCompile(`(?m)^(MemoryDenyWriteExecute|LimitAS)=`).Match(unit) {
		t.Error("the unit sets MemoryDenyWriteExecute or LimitAS, which the engines cannot run under")
	}
}

// The compose file is valid Compose, as docker compose (or the older
// docker-compose) reads it.
func TestComposeFile(t *testing.T) {
	args := []string{"-f", "compose.yaml", "config", "--quiet"}
	if exec.Command("docker", "compose", "version").Run() == nil {
		run(t, "docker", append([]string{"compose"}, args...)...)
		return
	}
	run(t, tool(t, "docker-compose", "apt-get install docker-compose, or Docker's compose plugin"), args...)
}

// The manifests pass kubeconform's strict check against the Kubernetes API
// of kubernetesVersion. Not kubeconform's own schemas, which come from
// GitHub: these are made from the API's OpenAPI documents in the
// k8s.io/kubernetes module, which the Go module proxy serves (cached in
// GOMODCACHE like any module). Skipped only when the proxy cannot be
// reached.
func TestKubernetesManifests(t *testing.T) {
	kubeconform := tool(t, "kubeconform", "go install github.com/yannh/kubeconform/cmd/kubeconform@v0.6.7")
	schemas := t.TempDir()
	writeKindSchemas(t, kubernetesOpenAPI(t), schemas)
	out, err := exec.Command(kubeconform, "-strict", "-summary",
		"-schema-location", filepath.Join(schemas, "{{ .ResourceKind }}{{ .KindSuffix }}.json"),
		"kubernetes").CombinedOutput()
	if err != nil {
		t.Fatalf("kubeconform: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// The Kubernetes release whose API the manifests are checked against.
const kubernetesVersion = "v1.37.2"

// kubernetesOpenAPI returns the directory of the API's OpenAPI v3
// documents, one per group and version, downloading the module once.
func kubernetesOpenAPI(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+kubernetesVersion)
	cmd.Dir = t.TempDir() // outside this module: its go.mod and go.sum stay as they are
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &mod); jsonErr != nil && err == nil {
		t.Fatalf("go mod download: %v\n%s", jsonErr, out)
	}
	if err != nil || mod.Error != "" {
		if unreachable.MatchString(mod.Error) {
			t.Skipf("the Go module proxy cannot be reached, so the Kubernetes API's schemas cannot be had: not checked\n%s", mod.Error)
		}
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v %s\n%s", kubernetesVersion, err, mod.Error, stderr.String())
	}
	return filepath.Join(mod.Dir, "api", "openapi-spec", "v3")
}

// What go reports when it cannot reach the module proxy.
var unreachable = regexp.MustCompile(`dial tcp|no such host|connection refused|i/o timeout|network is unreachable|GOPROXY=off`)

// writeKindSchemas writes into dir, under kubeconform's names
// (statefulset-apps-v1.json), a schema per kind of the API: each refers
// to its definition in a copy of its group's document, in which every
// object with listed properties allows no others (kubeconform's strict
// schemas do the same), so that a misspelt field fails.
func writeKindSchemas(t *testing.T, openAPI, dir string) {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(openAPI, "*.json"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no OpenAPI documents in %s (%v)", openAPI, err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var api struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(b, &api); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		for _, s := range api.Components.Schemas {
			closeObjects(s)
		}
		group := "group-" + filepath.Base(doc)
		writeJSON(t, filepath.Join(dir, group), map[string]any{"components": api.Components})
		for name, s := range api.Components.Schemas {
			gvks, _ := s["x-kubernetes-group-version-kind"].([]any)
			for _, gvk := range gvks {
				gvk := gvk.(map[string]any)
				kind := filepath.Join(dir, kindSchemaName(gvk["group"].(string), gvk["version"].(string), gvk["kind"].(string)))
				if !fileExists(kind) { // the first group that defines a kind, as each document repeats the shared ones
					writeJSON(t, kind, map[string]any{"$ref": group + "#/components/schemas/" + name})
				}
			}
		}
	}
}

// kindSchemaName is kubeconform's file name for a kind's schema: its kind,
// the group's first label and the version ({{ .ResourceKind }}{{ .KindSuffix }}).
func kindSchemaName(group, version, kind string) string {
	suffix := "-" + version
	if group != "" {
		suffix = "-" + strings.Split(group, ".")[0] + suffix
	}
	return strings.ToLower(kind+suffix) + ".json"
}

// closeObjects sets additionalProperties false on every schema, s and
// those within it, that lists properties and says nothing of others.
func closeObjects(s map[string]any) {
	if props, ok := s["properties"].(map[string]any); ok {
		if _, set := s["additionalProperties"]; !set {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			closeSchema(p)
		}
	}
	for _, key := range []string{"items", "additionalProperties", "not"} {
		closeSchema(s[key])
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		list, _ := s[key].([]any)
		for _, sub := range list {
			closeSchema(sub)
		}
	}
}

func closeSchema(s any) {
	if m, ok := s.(map[string]any); ok {
		closeObjects(m)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// What the StatefulSet must keep, whatever the schema allows: the pod's
// name is the node id, a clean stop fits the grace period, and the probes
// ask health and readiness.
func TestStatefulSetKeepsTheNodeID(t *testing.T) {
	b, err := os.ReadFile("kubernetes/wasmkeep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]any
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		m, err := yaml.Parser().Unmarshal([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if m["kind"] == "StatefulSet" {
			set = m
		}
	}
	if set == nil {
		t.Fatal("no StatefulSet in kubernetes/wasmkeep.yaml")
	}
	pod := dig(set, "spec", "template", "spec").(map[string]any)
	if grace, _ := pod["terminationGracePeriodSeconds"].(int); grace < 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want 30 or more: a clean stop takes up to about 29 s", pod["terminationGracePeriodSeconds"])
	}
	c := pod["containers"].([]any)[0].(map[string]any)
	args := strings.Join(anyStrings(c["args"]), " ")
	podName := false
	for _, e := range c["env"].([]any) {
		podName = podName || dig(e, "name") == "POD_NAME" && dig(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name"
	}
	if !strings.Contains(args, "--node-id=$(POD_NAME)") || !podName {
		t.Errorf("the node id is not the pod's name (POD_NAME from metadata.name): args %s", args)
	}
	for probe, path := range map[string]string{"livenessProbe": "/_wasmkeep/health", "readinessProbe": "/_wasmkeep/ready"} {
		if got := dig(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s asks %v, want %s", probe, got, path)
		}
	}
}

func dig(m any, keys ...string) any {
	for _, k := range keys {
		mm, _ := m.(map[string]any)
		m = mm[k]
	}
	return m
}

func anyStrings(v any) []string {
	var s []string
	for _, e := range v.([]any) {
		s = append(s, e.(string))
	}
	return s
}

// The alert rules are valid, and their unit tests (each rule fires when its
// condition held long enough, not before) pass.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "apt-get install prometheus")
	run(t, promtool, "check", "rules", "prometheus/alerts.yaml")
	run(t, promtool, "test", "rules", "prometheus/alerts_test.yaml")
}

// The image builds with buildah. Its base images come from docker.io, so
// the build runs only where WASMKEEP_IMAGE_CHECK=1 says it may reach there.
func TestImageBuilds(t *testing.T) {
	if os.Getenv("WASMKEEP_IMAGE_CHECK") != "1" {
		t.Skip("the image build pulls its base images from docker.io: set WASMKEEP_IMAGE_CHECK=1 to run it (with buildah installed)")
	}
	buildah := tool(t, "buildah", "apt-get install buildah")
	run(t, buildah, "build", "--isolation", "chroot", "--format", "docker", "-t", "wasmkeep:check", "-f", "../Dockerfile", "..")
	out := run(t, buildah, "inspect", "--type", "image", "--format", "{{.OCIv1.Config.User}} {{.Docker.Config.Healthcheck.Test}}", "wasmkeep:check")
	if !strings.HasPrefix(out, "wasmkeep ") || !strings.Contains(out, "/_wasmkeep/ready") {
		t.Errorf("the image's user and health check: %q, want wasmkeep and a check of /_wasmkeep/ready", out)
	}
}
