package main

import (
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	processbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-process"
)

// The shared suite, whole (64 MiB objects, 2,500 keys, racing writers),
// through the plugin boundary: each rule starts the provider binary, on one
// directory. The binary is built here, as a user would.
func TestConformance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "wasmkeep-bucket-fs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Run by hand, it says what it is.
	out, err := exec.Command(bin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `WasmKeep bucket provider (the bucket plugin "fs", bucket/v1`) {
		t.Errorf("run by hand: %v\n%s", err, out)
	}
	dir := t.TempDir()
	buckettest.Run(t, func(t *testing.T) bucket.Bucket {
		b, err := processbucket.Open(processbucket.Config{
			Path:     bin,
			Settings: map[string]any{"dir": dir},
		}, slog.New(slog.NewTextHandler(t.Output(), nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}
