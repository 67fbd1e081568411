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
	in := Info()
	d, err := in.New(in.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	return d.(runtime.Driver)
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtime.Driver { return newDriver(t) })
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
	if !ok || c.InterruptInterval != time.Millisecond || !c.ParallelCompilation {
		t.Errorf("NewConfig() = %#v, want *Config with a 1ms interrupt interval and parallel compilation", in.NewConfig())
	}
	if _, err := in.New(Config{InterruptInterval: time.Millisecond}); err == nil {
		t.Error("New accepted a Config value instead of a pointer")
	}
	for _, d := range []time.Duration{0, time.Microsecond, time.Minute} {
		if _, err := in.New(&Config{InterruptInterval: d}); err == nil {
			t.Errorf("New accepted interrupt_interval %v", d)
		}
	}
}
