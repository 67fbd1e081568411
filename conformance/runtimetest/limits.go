package runtimetest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// A call whose ctx is done returns promptly with an error matching
// ErrInterrupted: a loop without calls, calls without a loop, a guest asleep
// in poll_oneoff, a ctx done before the call, an _initialize that never
// ends. A new instance still runs.
func testInterrupt(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	spin := compile(t, e, failGuest())
	wasi := compile(t, e, wasiGuest())
	deadline := func(parent context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(parent, 50*time.Millisecond)
	}
	canceled := func(parent context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(parent)
		time.AfterFunc(50*time.Millisecond, cancel)
		return ctx, cancel
	}
	done := func(parent context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(parent)
		cancel()
		return ctx, cancel
	}
	for _, tc := range []struct {
		name  string
		mod   runtime.Module
		fn    string
		setup func(*testing.T, runtime.Instance) []uint64
		ctx   func(context.Context) (context.Context, context.CancelFunc)
	}{
		{"loop/deadline", spin, "spin", nil, deadline},
		{"loop/cancel", spin, "spin", nil, canceled},
		{"loop/done before", spin, "spin", nil, done},
		{"recursion/deadline", spin, "fanout", func(*testing.T, runtime.Instance) []uint64 { return []uint64{62} }, deadline},
		{"sleep/deadline", wasi, "poll_oneoff", sleepFor(time.Hour), deadline},
		{"sleep/cancel", wasi, "poll_oneoff", sleepFor(time.Hour), canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := instantiate(t, tc.mod, runtime.InstanceConfig{})
			var args []uint64
			if tc.setup != nil {
				args = tc.setup(t, in)
			}
			ctx, cancel := tc.ctx(t.Context())
			defer cancel()
			start := time.Now()
			_, err := tryCall(ctx, in, tc.fn, args...)
			if took := time.Since(start); took > promptly {
				t.Errorf("the stopped call returned after %v", took)
			}
			if !errors.Is(err, runtime.ErrInterrupted) {
				t.Errorf("error %v does not match ErrInterrupted", err)
			}
			if fresh := startOn(t, e, addGuest()); call(t, fresh, "add32", 1, 2)[0] != 3 {
				t.Error("a new instance does not run after an interrupt")
			}
		})
	}
	t.Run("_initialize/deadline", func(t *testing.T) {
		m := &wasmModule{}
		m.function("_initialize", sig(""), nil, loop(br(0)))
		mod := compile(t, e, m.bytes())
		ctx, cancel := deadline(t.Context())
		defer cancel()
		start := time.Now()
		in, err := mod.Instantiate(ctx, runtime.InstanceConfig{})
		if took := time.Since(start); took > promptly {
			t.Errorf("the stopped Instantiate returned after %v", took)
		}
		if err == nil {
			in.Close(t.Context())
		}
		if !errors.Is(err, runtime.ErrInterrupted) {
			t.Errorf("error %v does not match ErrInterrupted", err)
		}
	})
}

// Instantiate runs the guest's own code, its start function and
// _initialize, through InstanceConfig.Guest and under the ctx Guest gives
// it, and fails with Guest's error; for a module with neither it never calls
// Guest. The kernel bounds that code by the event's CPU budget, and only
// that code.
func testInstantiateGuest(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	var calls int
	counted := runtime.InstanceConfig{Guest: func(ctx context.Context, run func(context.Context) error) error {
		calls++
		return run(ctx)
	}}
	initialize := &wasmModule{}
	initialize.function("_initialize", sig(""), nil)
	withStart := &wasmModule{}
	withStart.function("_initialize", sig(""), nil)
	withStart.start = uleb(withStart.function("", sig(""), nil))
	for _, tc := range []struct {
		name string
		wasm []byte
		want int
	}{
		{"neither", addGuest(), 0},
		{"_initialize", initialize.bytes(), 1},
		{"start and _initialize", withStart.bytes(), 2},
	} {
		calls = 0
		instantiate(t, compile(t, e, tc.wasm), counted).Close(t.Context())
		if calls != tc.want {
			t.Errorf("%s: Guest called %d times, want %d", tc.name, calls, tc.want)
		}
	}
	spin := &wasmModule{}
	spin.function("_initialize", sig(""), nil, loop(br(0)))
	errStopped := errors.New("stopped by Guest")
	stopped := runtime.InstanceConfig{Guest: func(ctx context.Context, run func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		return fmt.Errorf("%w: %w", errStopped, run(ctx))
	}}
	in, err := compile(t, e, spin.bytes()).Instantiate(t.Context(), stopped)
	if err == nil {
		in.Close(t.Context())
	}
	if !errors.Is(err, errStopped) || !errors.Is(err, runtime.ErrInterrupted) {
		t.Errorf("an _initialize stopped by Guest's ctx: %v, want Guest's error, interrupted", err)
	}
}

// sleepFor lays out a poll_oneoff subscription to a relative monotonic clock
// timeout of d at 512 and returns poll_oneoff's arguments: events at 1024,
// their count at 1536.
func sleepFor(d time.Duration) func(*testing.T, runtime.Instance) []uint64 {
	return func(t *testing.T, in runtime.Instance) []uint64 {
		sub := make([]byte, 48)
		binary.LittleEndian.PutUint64(sub[0:], 7)          // userdata
		sub[8] = 0                                         // tag: clock
		binary.LittleEndian.PutUint32(sub[16:], 1)         // clock id: monotonic
		binary.LittleEndian.PutUint64(sub[24:], uint64(d)) // timeout, ns
		binary.LittleEndian.PutUint16(sub[40:], 0)         // flags: relative
		write(t, in, 512, sub)
		return []uint64{512, 1024, 1, 1536}
	}
}

// The engine writes the memory a guest grows once, as host work of the call
// (runtime.AsHostWork), by the time the call returns, so that the guest's
// CPU budget does not pay the machine's page faults (ADR 1043). The initial
// memory is left as it is: only what the guest writes of it costs memory.
func testMemoryGrowthIsHostWork(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	in := instantiate(t, compile(t, e, memoryGuest(2, -1)), runtime.InstanceConfig{})
	var w hostWork
	if got, err := tryCall(runtime.WithHostWork(t.Context(), &w), in, "grow", limitPages-2); err != nil || int32(got[0]) != 2 {
		t.Fatalf("grow(%d) = %v, %v; want 2", limitPages-2, got, err)
	}
	if w.calls == 0 {
		t.Error("the growth was not host work")
	}
	resident := func(from, to uint32) (n int) {
		view, ok := in.Memory().Read(from, to-from)
		if !ok {
			t.Fatalf("Read(%d, %d) failed", from, to-from)
		}
		vec := make([]byte, len(view)/os.Getpagesize())
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&view[0])), uintptr(len(view)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatalf("mincore: %v", errno)
		}
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if n := resident(2<<16, limitPages<<16); n != (limitPages-2)<<16/os.Getpagesize() {
		t.Errorf("%d pages of the grown memory are resident, want all %d", n, (limitPages-2)<<16/os.Getpagesize())
	}
	if n := resident(0, 2<<16); n != 0 {
		t.Errorf("%d pages of the initial memory, which the guest never wrote, are resident", n)
	}
}

// A guest's sleep (poll_oneoff on a clock) runs through the Waiter of the
// call's ctx (runtime.AsWait), so that the kernel runs it outside the
// event's turn of the cores (ADR 1057).
func testSleepIsAWait(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{})
	in := instantiate(t, compile(t, e, wasiGuest()), runtime.InstanceConfig{})
	var w waits
	got, err := tryCall(runtime.WithWaiter(t.Context(), &w), in, "poll_oneoff", sleepFor(time.Millisecond)(t, in)...)
	if err != nil || got[0] != 0 {
		t.Fatalf("poll_oneoff = %v, %v; want errno 0", got, err)
	}
	if w != 1 {
		t.Errorf("the sleep ran through the ctx's Waiter %d times, want once", w)
	}
}

// waits counts the waits of the calls whose ctx carries it.
type waits int

func (w *waits) Wait(f func()) { *w++; f() }

// hostWork counts the host work of the calls whose ctx carries it.
type hostWork struct{ calls int }

func (w *hostWork) EnterHost() time.Duration { w.calls++; return 0 }
func (w *hostWork) LeaveHost(time.Duration)  {}

// memory.grow past MemoryLimitPages fails (-1) whatever maximum the module
// declares, a module's own lower maximum holds, and a module whose minimum
// is above the limit is refused at compile, naming the minimum and the
// limit (not at instantiate: the kernel instantiates under an event's
// limits, where the refusal would read as the event's failure).
func testMemoryLimit(t *testing.T, h *harness) {
	e := h.engine(t, runtime.Config{MemoryLimitPages: 4})
	for _, tc := range []struct {
		name      string
		min       uint32
		max       int64
		wantPages uint32
	}{
		{"no max", 1, -1, 4},
		{"max above limit", 1, 100, 4},
		{"max below limit", 1, 2, 2},
		{"min at limit", 4, -1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := instantiate(t, compile(t, e, memoryGuest(tc.min, tc.max)), runtime.InstanceConfig{})
			if tc.wantPages > tc.min {
				if got := int32(call(t, in, "grow", uint64(tc.wantPages-tc.min))[0]); got != int32(tc.min) {
					t.Errorf("grow(%d) = %d, want %d", tc.wantPages-tc.min, got, tc.min)
				}
			}
			if got := int32(call(t, in, "grow", 1)[0]); got != -1 {
				t.Errorf("grow(1) at %d pages = %d, want -1", tc.wantPages, got)
			}
			if got := uint32(call(t, in, "size")[0]); got != tc.wantPages {
				t.Errorf("size() = %d, want %d", got, tc.wantPages)
			}
			if got := in.Memory().Size(); got != tc.wantPages*65536 {
				t.Errorf("Memory().Size() = %d, want %d", got, tc.wantPages*65536)
			}
		})
	}
	t.Run("min above limit", func(t *testing.T) {
		m, err := e.Compile(t.Context(), memoryGuest(5, -1))
		if err == nil {
			m.Close(t.Context())
			t.Fatal("a module with 5 pages minimum compiled under a limit of 4")
		}
		if want := "a minimum of 5 pages (320 KiB), above the memory limit of 4 pages (256 KiB)"; !strings.Contains(err.Error(), want) {
			t.Errorf("refused with %q, want it to say %q", err, want)
		}
	})
}

// An engine compiles with a CacheDir another engine filled, including after
// its files were corrupted or truncated.
func testCompileCache(t *testing.T, h *harness) {
	dir := t.TempDir()
	run := func(step string) {
		e, err := h.newDriver(t).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: limitPages, CacheDir: dir})
		if err != nil {
			t.Fatalf("%s: NewEngine: %v", step, err)
		}
		defer e.Close(t.Context())
		m, err := e.Compile(t.Context(), addGuest())
		if err != nil {
			t.Fatalf("%s: Compile: %v", step, err)
		}
		defer m.Close(t.Context())
		in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
		if err != nil {
			t.Fatalf("%s: Instantiate: %v", step, err)
		}
		defer in.Close(t.Context())
		if got := call(t, in, "add32", 2, 3)[0]; got != 5 {
			t.Errorf("%s: add32(2, 3) = %d", step, got)
		}
	}
	damage := func(how func([]byte) []byte) {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(path, how(b), 0o600)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	run("empty cache")
	run("filled cache")
	damage(func(b []byte) []byte {
		for i := range b {
			b[i] ^= 0xa5
		}
		return b
	})
	run("corrupted cache")
	damage(func(b []byte) []byte { return b[:len(b)/2] })
	run("truncated cache")
}
