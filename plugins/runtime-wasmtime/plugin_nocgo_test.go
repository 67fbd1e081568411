//go:build !cgo

package wasmtimeruntime

import (
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Without cgo the plugin is listed but unavailable, and choosing it says
// how to get it.
func TestInfoWithoutCgo(t *testing.T) {
	in := Info()
	if in.Kind != plugin.Runtime || in.Name != "wasmtime" || in.API != runtime.API || in.New != nil {
		t.Errorf("Info() = %+v, want runtime.wasmtime %s without New", in, runtime.API)
	}
	r, err := plugin.NewRegistry(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(plugin.Runtime, "wasmtime"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Errorf("Lookup: %v, want an error saying to rebuild with CGO_ENABLED=1", err)
	}
}
