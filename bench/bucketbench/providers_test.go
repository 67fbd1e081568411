package bucketbench

import (
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"

	fsbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-fs"
	processbucket "github.com/wasmkeep/wasmkeep/plugins/bucket-process"
	"github.com/wasmkeep/wasmkeep/plugins/bucket-s3/s3test"
)

// The fs bucket on a temporary directory (each write fsynced).
func BenchmarkFS(b *testing.B) {
	bk, err := fsbucket.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() }) // after Run's own clean-up
	Run(b, bk)
}

// The same fs bucket out of process (cmd/wasmkeep-bucket-fs through the
// process plugin): what the plugin boundary adds.
func BenchmarkProcessFS(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "wasmkeep-bucket-fs")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/wasmkeep-bucket-fs").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	bk, err := processbucket.Open(processbucket.Config{Path: bin, Settings: map[string]any{"dir": b.TempDir()}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() }) // after Run's own clean-up
	Run(b, bk)
}

// The s3 bucket against a local VersityGW (its posix backend on a temporary
// directory) over loopback: the client's and the protocol's cost, not a
// cloud store's.
func BenchmarkS3(b *testing.B) {
	Run(b, s3test.Start(b).Open(b))
}
