package wazeroruntime

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The compile cache's folder names the copy of wazero the build uses by a
// digest of its files, so a change to them (scripts/update-wazero, or the
// patch) must come with a new digest.
func TestThirdPartyWazeroDigest(t *testing.T) {
	root := filepath.Join("..", "..", filepath.FromSlash(thirdPartyWazero))
	h := sha256.New()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		h.Write([]byte(filepath.ToSlash(rel) + "\x00"))
		h.Write(b)
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil))[:16]; got != thirdPartyWazeroDigest {
		t.Errorf("third_party/wazero changed: set thirdPartyWazeroDigest in engine.go to %q (or remove what is there that git does not keep)", got)
	}
}

func TestCacheDirName(t *testing.T) {
	wazero := func(version string, replace *debug.Module) []*debug.Module {
		return []*debug.Module{{Path: "example.com/other", Version: "v1.0.0"}, {Path: "github.com/tetratelabs/wazero", Version: version, Replace: replace}}
	}
	for _, c := range []struct {
		deps []*debug.Module
		want string
	}{
		{wazero("v1.12.0", nil), "wazero-v1.12.0"},
		{wazero("v1.12.0", &debug.Module{Path: thirdPartyWazero, Version: "(devel)"}), "wazero-v1.12.0-" + thirdPartyWazeroDigest},
		{wazero("v1.12.0", &debug.Module{Path: "../elsewhere/wazero"}), ""},
		{wazero("v1.12.0", &debug.Module{Path: "example.com/fork", Version: "v1.12.1"}), ""},
		{wazero("", nil), ""},
		{nil, ""},
	} {
		if got := cacheDirName(c.deps); got != c.want {
			t.Errorf("cacheDirName(wazero %v replaced by %+v) = %q, want %q", c.deps, c.deps, got, c.want)
		}
	}
}

// A guest that runs ref.func in a loop makes the host allocate nothing per
// run: wazero v1.12.0 allocated a function reference each time (66 bytes a
// run, kept while the instance lives), so one event could make the host
// allocate gigabytes. The patch in third_party/wazero makes a function's
// reference once.
func TestRefFuncAllocatesOnce(t *testing.T) {
	// (func (export "f") (param i32)
	//   (loop (table.set 0 (i32.const 0) (ref.func 0))
	//         (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1))))))
	body := []byte{0, 0x03, 0x40, 0x41, 0, 0xd2, 0, 0x26, 0, 0x20, 0, 0x41, 1, 0x6b, 0x22, 0, 0x0d, 0, 0x0b, 0x0b}
	m := compileOn(t, binaryModule(
		sec(wasmbin.TypeSection, 1, 0x60, 1, 0x7f, 0),
		sec(wasmbin.FunctionSection, 1, 0),
		sec(wasmbin.TableSection, 1, 0x70, 0, 1),
		sec(wasmbin.ExportSection, 1, 1, 'f', kindFunc, 0),
		sec(wasmbin.CodeSection, append([]byte{1, byte(len(body))}, body...)...),
	))
	inst, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(t.Context())
	f := inst.Function("f")
	const runs = 1_000_000
	allocated := testing.AllocsPerRun(1, func() {
		if err := f.Call(t.Context(), []uint64{runs}); err != nil {
			t.Fatal(err)
		}
	})
	if allocated > runs/100 {
		t.Errorf("%d runs of ref.func allocated %.0f times", runs, allocated)
	}
}
