package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The server binary does not link package testing: no package it imports,
// ours or a dependency's, may import it (a conformance suite's Run lives
// beside a Check that needs no testing.T, and names no type of testing;
// go-plugin is built from third_party/go-plugin, upstream's module without
// its testing.go: ADR 1017).
func TestServerDoesNotLinkTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if slices.Contains(fields[1:], "testing") {
			importers = append(importers, fields[0])
		}
	}
	if len(importers) > 0 {
		t.Errorf("the server binary links package testing, imported by %s: move what needs testing.T to a _test.go file or a package the command does not import (a dependency that does: see ADR 1017)", strings.Join(importers, ", "))
	}
}
