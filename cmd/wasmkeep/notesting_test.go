package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The server binary does not link package testing: no package of this
// module that it imports may import it (a conformance suite's Run lives
// beside a Check that needs no testing.T, and names no type of testing).
//
// One dependency still does, and is allowed by name:
// github.com/hashicorp/go-plugin (through plugins/bucket-process) imports
// testing in its testing.go, for helpers the server never calls, so the
// linker keeps testing's package initialisation and nothing else; and since
// Go 1.13 that registers no -test.* flag. Any other importer fails here.
func TestServerDoesNotLinkTesting(t *testing.T) {
	allowed := []string{"github.com/hashicorp/go-plugin"}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var importers []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if slices.Contains(fields[1:], "testing") && !slices.Contains(allowed, fields[0]) {
			importers = append(importers, fields[0])
		}
	}
	if len(importers) > 0 {
		t.Errorf("the server binary links package testing, imported by %s: move what needs testing.T to a _test.go file or a package the command does not import", strings.Join(importers, ", "))
	}
}
