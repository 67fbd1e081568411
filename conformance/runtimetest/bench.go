package runtimetest

import (
	"context"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// Benchmark measures an engine's hot paths on d: calling an export, and a
// guest calling a host function, bare and reading the guest's memory. The
// host call benchmarks loop in the guest, so ns/op is per host call.
func Benchmark(b *testing.B, d runtime.Driver) {
	fns := []runtime.HostFunction{
		{Name: "nop", Signature: sig("i>i"), Func: func(context.Context, runtime.Memory, []uint64) {}},
		{Name: "peek", Signature: sig("ii>i"), Func: func(_ context.Context, mem runtime.Memory, stack []uint64) {
			view, _ := mem.Read(uint32(stack[0]), uint32(stack[1]))
			stack[0] = uint64(len(view))
		}},
	}
	ctx := b.Context()
	e, err := d.NewEngine(ctx, runtime.Config{MemoryLimitPages: limitPages, HostModule: hostModule, HostFunctions: fns})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, loopGuest())
	if err != nil {
		b.Fatal(err)
	}
	in, err := m.Instantiate(ctx, runtime.InstanceConfig{})
	if err != nil {
		b.Fatal(err)
	}

	b.Run("ExportCall", func(b *testing.B) {
		f := in.Function("add")
		stack := make([]uint64, 2)
		b.ReportAllocs()
		for b.Loop() {
			stack[0], stack[1] = 1, 2
			if err := f.Call(ctx, stack); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GuestCalls", func(b *testing.B) { // per op: 1023 calls between guest functions
		f := in.Function("fanout")
		stack := make([]uint64, 1)
		b.ReportAllocs()
		for b.Loop() {
			stack[0] = 9
			if err := f.Call(ctx, stack); err != nil {
				b.Fatal(err)
			}
		}
	})
	for name, export := range map[string]string{"HostCall": "nops", "HostCallRead": "peeks"} {
		b.Run(name, func(b *testing.B) {
			f := in.Function(export)
			stack := make([]uint64, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for left := b.N; left > 0; left -= int(stack[0]) {
				stack[0] = uint64(min(left, 1<<30))
				n := stack[0]
				if err := f.Call(ctx, stack); err != nil {
					b.Fatal(err)
				}
				stack[0] = n
			}
		})
	}
}
