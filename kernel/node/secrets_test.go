package node

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// A secrets change waits for no Apply's compile (issue 27 item 6; the
// book's ADR 0016: a version this node cannot build does not delay a
// secrets change): applyMu held as an Apply holds it while it compiles,
// SetSecrets installs the new values all the same.
func TestSetSecretsWaitsForNoCompile(t *testing.T) {
	n := &Node{log: slog.New(slog.NewTextHandler(io.Discard, nil)), swapped: make(chan struct{}),
		dep: &deployment{id: "aaaa", seq: 1, classes: map[string]*class{"s": {name: "s", seq: 1, spec: ClassSpec{Requires: []string{"TOKEN"}}}}}}
	n.applyMu.Lock() // an Apply compiling
	defer n.applyMu.Unlock()
	done := make(chan struct{})
	go func() {
		n.SetSecrets(map[string]map[string]string{"s": {"TOKEN": "two"}})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SetSecrets waited for the Apply's compile")
	}
	if c := n.class("s"); c.env["TOKEN"] != "two" || len(c.missing) != 0 {
		t.Fatalf("class s after SetSecrets: env %v, missing %v", c.env, c.missing)
	}
}
