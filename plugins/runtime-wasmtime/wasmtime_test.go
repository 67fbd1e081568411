//go:build cgo

package wasmtimeruntime

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/conformance/runtimetest"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

func newDriver(t testing.TB) runtime.Driver {
	return newTieredDriver(t, runtime.TieringOn)
}

func newTieredDriver(t testing.TB, tiering string) runtime.Driver {
	in := Info()
	c := in.NewConfig().(*Config)
	c.Tiering = tiering
	d, err := in.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d.(runtime.Driver)
}

// The suite passes at opt level speed alone (tiering: off, which auto is),
// at opt level none alone (fast), and with both tiers (on: modules start at
// none and switch to speed).
func TestConformance(t *testing.T) {
	for _, tiering := range []string{runtime.TieringOff, runtime.TieringOn, runtime.TieringFast} {
		t.Run(tiering, func(t *testing.T) {
			runtimetest.Run(t, func(t *testing.T) runtime.Driver { return newTieredDriver(t, tiering) })
		})
	}
}

func BenchmarkEngine(b *testing.B) {
	runtimetest.Benchmark(b, newDriver(b))
}

func TestInfo(t *testing.T) {
	in := Info()
	if in.Kind != plugin.Runtime || in.Name != "wasmtime" || in.API != runtime.API || in.Unavailable != "" {
		t.Errorf("Info() = %s %s (unavailable %q), want runtime.wasmtime %s", in.ID(), in.API, in.Unavailable, runtime.API)
	}
	if _, err := plugin.NewRegistry(in); err != nil {
		t.Error(err)
	}
	c, ok := in.NewConfig().(*Config)
	if !ok || c.InterruptInterval != time.Millisecond || !c.ParallelCompilation || c.Tiering != runtime.TieringOff {
		t.Errorf("NewConfig() = %#v, want *Config with a 1ms interrupt interval, parallel compilation and tiering off", in.NewConfig())
	}
	if _, err := in.New(&Config{InterruptInterval: time.Millisecond, Tiering: "sometimes"}); err == nil {
		t.Error("New accepted tiering: sometimes")
	}
	if _, err := in.New(Config{InterruptInterval: time.Millisecond}); err == nil {
		t.Error("New accepted a Config value instead of a pointer")
	}
	for _, d := range []time.Duration{0, time.Microsecond, time.Minute} {
		if _, err := in.New(&Config{InterruptInterval: d, Tiering: runtime.TieringAuto}); err == nil {
			t.Errorf("New accepted interrupt_interval %v", d)
		}
	}
}
