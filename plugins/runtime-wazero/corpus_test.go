package wazeroruntime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// Every module of wazero's own test corpus that wazero compiles also
// compiles once prepared, unless it breaks one of prepare's limits.
func TestPrepareWazeroCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles thousands of modules")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tetratelabs/wazero").Output()
	if err != nil {
		t.Skip("cannot locate wazero's sources:", err)
	}
	dir := strings.TrimSpace(string(out))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	var compiled, refused int
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".wasm") {
			return err
		}
		wasm, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cm, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			return nil
		}
		cm.Close(ctx)
		compiled++
		p, err := prepare(wasm, maxPages)
		if err != nil {
			refused++
			t.Logf("%s: %v", path[len(dir):], err)
			return nil
		}
		cm, err = rt.CompileModule(ctx, p.wasm)
		if err != nil {
			t.Errorf("%s: wazero compiles it but not prepared: %v", path[len(dir):], err)
			return nil
		}
		cm.Close(ctx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d modules compiled, %d refused by prepare", compiled, refused)
}
