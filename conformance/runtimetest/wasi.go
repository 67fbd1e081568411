package runtimetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// What the guest writes to fds 1 and 2 reaches the instance's writers (nil
// discards it), and stdin is empty.
func testStdio(t *testing.T, h *harness) {
	mod := compile(t, h.engine(t, runtime.Config{}), wasiGuest())
	var stdout, stderr bytes.Buffer
	in := instantiate(t, mod, runtime.InstanceConfig{Stdout: &stdout, Stderr: &stderr})
	silent := instantiate(t, mod, runtime.InstanceConfig{})
	for _, in := range []runtime.Instance{in, silent} {
		write(t, in, 100, []byte("out line\nerr line\n"))
		iovecs := make([]byte, 24)
		for i, v := range []uint32{100, 4, 104, 5, 109, 9} { // "out " "line\n" | "err line\n"
			binary.LittleEndian.PutUint32(iovecs[4*i:], v)
		}
		write(t, in, 0, iovecs)
		if e := errno(t, in, "fd_write", 1, 0, 2, 64); e != 0 {
			t.Errorf("fd_write(1) errno %d", e)
		}
		if n := readU32(t, in, 64); n != 9 {
			t.Errorf("fd_write(1) wrote %d bytes, want 9", n)
		}
		if e := errno(t, in, "fd_write", 2, 16, 1, 64); e != 0 {
			t.Errorf("fd_write(2) errno %d", e)
		}
		write(t, in, 200, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 300), 16))
		if e := errno(t, in, "fd_read", 0, 200, 1, 64); e != 0 || readU32(t, in, 64) != 0 {
			t.Errorf("fd_read(0) = errno %d, %d bytes; want an empty stdin", e, readU32(t, in, 64))
		}
	}
	if stdout.String() != "out line\n" || stderr.String() != "err line\n" {
		t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), "out line\n", "err line\n")
	}
}

// The realtime clock reads the time of day, the monotonic clock counts from
// it at the process's start and advances across a poll_oneoff sleep that
// really sleeps; the CPU-time clocks are refused.
func testClocks(t *testing.T, h *harness) {
	in := h.start(t, runtime.Config{}, wasiGuest())
	clock := func(id uint64) time.Duration {
		if e := errno(t, in, "clock_time_get", id, 1, 2048); e != 0 {
			t.Fatalf("clock_time_get(%d) errno %d", id, e)
		}
		return time.Duration(readU64(t, in, 2048))
	}
	if diff := time.Since(time.Unix(0, int64(clock(0)))); diff.Abs() > time.Minute {
		t.Errorf("realtime clock is %v off the host's", diff)
	}
	// The monotonic clock counts from the realtime clock at the process's
	// start (runtime.Monotonic), not from the system's boot or the
	// instance's creation: a test process is younger than an hour.
	if diff := clock(0) - clock(1); diff < -time.Minute || diff > time.Hour {
		t.Errorf("the monotonic clock reads %v behind the realtime clock, want less than an hour (runtime.Monotonic)", diff)
	}
	if e := errno(t, in, "clock_time_get", 2, 1, 2048); e != 28 {
		t.Errorf("clock_time_get(process CPU time) errno %d, want 28 (EINVAL)", e)
	}

	const nap = 20 * time.Millisecond
	before, start := clock(1), time.Now()
	args := sleepFor(nap)(t, in)
	if e := errno(t, in, "poll_oneoff", args...); e != 0 {
		t.Fatalf("poll_oneoff errno %d", e)
	}
	slept, after := time.Since(start), clock(1)
	if slept < nap {
		t.Errorf("poll_oneoff for %v returned after %v", nap, slept)
	}
	if after-before < nap {
		t.Errorf("monotonic clock advanced %v across a %v sleep", after-before, nap)
	}
	if n, userdata := readU32(t, in, 1536), readU64(t, in, 1024); n != 1 || userdata != 7 {
		t.Errorf("poll_oneoff reported %d events, userdata %d; want 1, 7", n, userdata)
	}
}

// random_get yields fresh bytes on every call and in every instance.
func testRandom(t *testing.T, h *harness) {
	mod := compile(t, h.engine(t, runtime.Config{}), wasiGuest())
	var seen [][]byte
	for range 2 {
		in := instantiate(t, mod, runtime.InstanceConfig{})
		for range 2 {
			if e := errno(t, in, "random_get", 0, 32); e != 0 {
				t.Fatalf("random_get errno %d", e)
			}
			b := read(t, in, 0, 32)
			for _, s := range seen {
				if bytes.Equal(s, b) {
					t.Fatalf("random_get repeated %x", b)
				}
			}
			seen = append(seen, b)
		}
	}
}

// No directory is preopened, so path operations fail.
func testNoFilesystem(t *testing.T, h *harness) {
	in := h.start(t, runtime.Config{}, wasiGuest())
	if e := errno(t, in, "fd_prestat_get", 3, 0); e == 0 {
		t.Error("fd_prestat_get(3) succeeded: a directory is preopened")
	}
	write(t, in, 100, []byte("etc/passwd"))
	for _, fd := range []uint64{3, 0} {
		if e := errno(t, in, "path_open", fd, 0, 100, 10, 0, math.MaxUint64, math.MaxUint64, 0, 200); e == 0 {
			t.Errorf("path_open(fd %d) succeeded", fd)
		}
	}
}

// Socket calls fail.
func testNoSockets(t *testing.T, h *harness) {
	in := h.start(t, runtime.Config{}, wasiGuest())
	for _, fd := range []uint64{0, 3} {
		if e := errno(t, in, "sock_accept", fd, 0, 100); e == 0 {
			t.Errorf("sock_accept(%d) succeeded", fd)
		}
		if e := errno(t, in, "sock_recv", fd, 200, 1, 0, 300, 304); e == 0 {
			t.Errorf("sock_recv(%d) succeeded", fd)
		}
	}
}

// Arguments and environment are empty.
func testNoArgsOrEnviron(t *testing.T, h *harness) {
	in := h.start(t, runtime.Config{}, wasiGuest())
	for _, fn := range []string{"args_sizes_get", "environ_sizes_get"} {
		write(t, in, 0, make([]byte, 8))
		if e := errno(t, in, fn, 0, 4); e != 0 {
			t.Fatalf("%s errno %d", fn, e)
		}
		if n, size := readU32(t, in, 0), readU32(t, in, 4); n != 0 || size != 0 {
			t.Errorf("%s = %d entries, %d bytes; want none", fn, n, size)
		}
	}
}

// proc_exit ends the call with an error, whatever the code, even one an
// engine might use for its own interrupts.
func testProcExit(t *testing.T, h *harness) {
	mod := compile(t, h.engine(t, runtime.Config{}), wasiGuest())
	for _, code := range []uint32{0, 3, math.MaxUint32, 0xefffffff} {
		_, err := tryCall(t.Context(), instantiate(t, mod, runtime.InstanceConfig{}), "proc_exit", uint64(code))
		wantFailure(t, fmt.Sprintf("proc_exit(%d)", code), err)
	}
}
