package linearmem_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/kernel/plugin"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	wasmtimeruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wasmtime"
	wazeroruntime "github.com/wasmkeep/wasmkeep/plugins/runtime-wazero"
)

func sec(id byte, payload ...byte) []byte { return append([]byte{id, byte(len(payload))}, payload...) }

// zeroingGuest has 4 pages of memory with "data" at 0; its _initialize
// zeroes pages 1 and 2 (touching them, as the Go runtime does) and writes 7
// at 200,000, in page 3.
func zeroingGuest() []byte {
	body := []byte{0}                                                                         // no locals
	body = append(append(append(body, 0x41), wasmbin.AppendS64(nil, 65536)...), 0x41, 0)      // dst, value
	body = append(append(append(body, 0x41), wasmbin.AppendS64(nil, 131072)...), 0xfc, 11, 0) // size; memory.fill
	body = append(append(append(body, 0x41), wasmbin.AppendS64(nil, 200000)...), 0x41, 7)     // address, value
	body = append(body, 0x3a, 0, 0, 0x0b)                                                     // i32.store8; end
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range [][]byte{
		sec(1, 1, 0x60, 0, 0),
		sec(3, 1, 0),
		sec(5, 1, 0, 4),
		sec(7, 2, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 11, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0, 0),
		sec(10, append([]byte{1, byte(len(body))}, body...)...),
		sec(11, 1, 0, 0x41, 0, 0x0b, 4, 'd', 'a', 't', 'a'),
	} {
		wasm = append(wasm, s...)
	}
	return wasm
}

// After _initialize, both engines have handed back the pages the guest
// zeroed, and the guest's memory reads as it wrote it.
func TestEnginesReleaseZeroPages(t *testing.T) {
	page := unix.Getpagesize()
	forEachEngine(t, zeroingGuest(), func(t *testing.T, _ runtime.Module, in runtime.Instance) {
		mem, _ := in.Memory().Read(0, in.Memory().Size())
		if len(mem) != 4<<16 || string(mem[:4]) != "data" || mem[200000] != 7 {
			t.Fatalf("memory of %d bytes, %q at 0 and %d at 200,000; want 4 pages, \"data\", 7", len(mem), mem[:4], mem[200000])
		}
		resident := make([]byte, len(mem)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&resident[0]))); errno != 0 {
			t.Fatal(errno)
		}
		var kept int
		for p := 65536 / page; p < 196608/page; p++ {
			kept += int(resident[p] & 1)
		}
		if kept > 0 || resident[200000/page]&1 == 0 {
			t.Errorf("%d of the zeroed pages resident, the written one: %v; want none, true", kept, resident[200000/page]&1 != 0)
		}
		for i, b := range mem[4:] {
			if b != 0 && i+4 != 200000 {
				t.Fatalf("byte %d is %d, want 0", i+4, b)
			}
		}
	})
}

// forEachEngine compiles wasm on each engine and runs check on a new
// instance of it (memory limit 8 pages).
func forEachEngine(t *testing.T, wasm []byte, check func(t *testing.T, m runtime.Module, in runtime.Instance)) {
	for _, info := range []plugin.Info{wazeroruntime.Info(), wasmtimeruntime.Info()} {
		t.Run(info.Name, func(t *testing.T) {
			if info.Unavailable != "" {
				t.Fatalf("%s is not in this build (%s): run the tests with cgo", info.Name, info.Unavailable)
			}
			d, err := info.New(info.NewConfig())
			if err != nil {
				t.Fatal(err)
			}
			e, err := d.(runtime.Driver).NewEngine(t.Context(), runtime.Config{MemoryLimitPages: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(t.Context())
			m, err := e.Compile(t.Context(), wasm)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(t.Context())
			in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close(t.Context())
			check(t, m, in)
		})
	}
}

// imageGuest has 4 pages of memory, the first 3 of them data (7s) but
// for their last 100 bytes: both engines map that from a memory image.
func imageGuest() []byte {
	data := bytes.Repeat([]byte{7}, 3<<16-100)
	seg := append([]byte{1, 0, 0x41, 0, 0x0b}, wasmbin.AppendU32(nil, uint32(len(data)))...)
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	wasm = wasmbin.AppendSection(wasm, 5, []byte{1, 0, 4})
	wasm = wasmbin.AppendSection(wasm, 7, []byte{1, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0})
	return wasmbin.AppendSection(wasm, 11, append(seg, data...))
}

// A read of an instance's memory image maps the page read, not its
// neighbours (the kernel's fault-around), on both engines.
func TestEnginesMapOnlyTheImagePagesRead(t *testing.T) {
	page := unix.Getpagesize()
	skipWithFaultAround(t)
	forEachEngine(t, imageGuest(), func(t *testing.T, m runtime.Module, in runtime.Instance) {
		mem, _ := in.Memory().Read(0, 3<<16)
		read := len(mem) / page / 2
		if mem[read*page] != 7 {
			t.Fatalf("read %d, want 7", mem[read*page])
		}
		present := presentPages(t, mem)
		for i, p := range present {
			if p != (i == read) {
				t.Fatalf("page %d present: %v, want %v (of the image, only page %d was read): %v", i, p, i == read, read, present)
			}
		}
		// The image's last page too, though the data ends within it: a
		// range cut short there splits the mapping in two, one more
		// mapping per instance against the process's limit.
		if last := uintptr(unsafe.Pointer(&mem[len(mem)-1])); !registered(t, last) {
			t.Errorf("the image's last page (%#x) is not registered: the mapping was split", last)
		}
		if !in.Memory().Write(uint32(read*page), []byte{8}) {
			t.Fatal("write failed")
		}
		other, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(t.Context())
		for inst, want := range map[runtime.Instance]byte{in: 8, other: 7} {
			if got, _ := inst.Memory().Read(uint32(read*page), 1); got[0] != want {
				t.Errorf("read %d after the write, want %d", got[0], want)
			}
		}
	})
}

// On both engines an instance whose call failed teaches nothing, though it
// closes with pages mapped: a failed event (a trap, a stopped call) is not
// what a new instance's first events touch, and what is learned stays for
// the module's life.
func TestEnginesAnInstanceWhoseCallFailedDoesNotTeach(t *testing.T) {
	page := unix.Getpagesize()
	skipWithFaultAround(t)
	const written = 20 // f writes page 20 of the image, then traps
	forEachEngine(t, trappingImageGuest(written*page), func(t *testing.T, m runtime.Module, first runtime.Instance) {
		f := first.Function("f")
		if f == nil {
			t.Fatal("no export f")
		}
		if err := f.Call(t.Context(), nil); err == nil {
			t.Fatal("f returned, want a trap")
		}
		if mem, _ := first.Memory().Read(0, first.Memory().Size()); !presentPages(t, mem)[written] {
			t.Fatalf("page %d is not mapped after the call that wrote it", written)
		}
		next, _, present := closeAndInstantiate(t, m, first)
		defer next.Close(t.Context())
		if present[written] {
			t.Errorf("page %d was populated in the next instance: the failed call's instance taught", written)
		}
	})
}

// closeAndInstantiate closes first and makes m's next instance (for the
// caller to close, before the module), returning its memory and which of
// its pages are mapped before anything touches them.
func closeAndInstantiate(t *testing.T, m runtime.Module, first runtime.Instance) (next runtime.Instance, mem []byte, present []bool) {
	t.Helper()
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	next, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ = next.Memory().Read(0, next.Memory().Size())
	return next, mem, presentPages(t, mem)
}

// trappingImageGuest is imageGuest with an export f that writes a byte at
// addr and traps.
func trappingImageGuest(addr int) []byte {
	data := bytes.Repeat([]byte{7}, 3<<16-100)
	seg := append([]byte{1, 0, 0x41, 0, 0x0b}, wasmbin.AppendU32(nil, uint32(len(data)))...)
	body := append([]byte{0, 0x41}, wasmbin.AppendS64(nil, int64(addr))...)
	body = append(body, 0x41, 1, 0x3a, 0, 0, 0x00, 0x0b) // i32.const 1, i32.store8, unreachable, end
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	wasm = wasmbin.AppendSection(wasm, 1, []byte{1, 0x60, 0, 0})
	wasm = wasmbin.AppendSection(wasm, 3, []byte{1, 0})
	wasm = wasmbin.AppendSection(wasm, 5, []byte{1, 0, 4})
	wasm = wasmbin.AppendSection(wasm, 7, []byte{2, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 1, 'f', 0, 0})
	wasm = wasmbin.AppendSection(wasm, 10, append([]byte{1}, append(wasmbin.AppendU32(nil, uint32(len(body))), body...)...))
	return wasmbin.AppendSection(wasm, 11, append(seg, data...))
}

// On both engines, a module's next instances start with the pages its first
// instance mapped in its image (learned as it closes) already mapped, and
// read as the image.
func TestEnginesPopulateTheFirstInstancesPages(t *testing.T) {
	page := unix.Getpagesize()
	skipWithFaultAround(t)
	forEachEngine(t, imageGuest(), func(t *testing.T, m runtime.Module, first runtime.Instance) {
		const read, written, past = 5, 30, 55 // the image is pages 0 to 47
		mem, _ := first.Memory().Read(0, first.Memory().Size())
		if mem[read*page] != 7 {
			t.Fatalf("read %d, want 7", mem[read*page])
		}
		mem[written*page], mem[past*page] = 8, 8
		next, mem, present := closeAndInstantiate(t, m, first)
		defer next.Close(t.Context())
		for i, p := range present[:past+1] {
			if want := i == read || i == written; p != want && i < 48 || i == past && p {
				t.Fatalf("page %d present: %v, want %v (the first instance read page %d and wrote %d, and %d past the image): %v",
					i, p, want, read, written, past, present)
			}
		}
		if mem[read*page] != 7 || mem[written*page] != 7 || mem[past*page] != 0 {
			t.Errorf("pages %d, %d, %d read %d, %d, %d; want 7, 7, 0", read, written, past, mem[read*page], mem[written*page], mem[past*page])
		}
	})
}

// skipWithFaultAround skips a test of which pages a read maps where the
// kernel keeps fault-around (userfaultfd refused): that is its choice there.
func skipWithFaultAround(t *testing.T) {
	t.Helper()
	probe, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(probe)
	if !linearmem.NoFaultAround(probe) {
		t.Skip("this kernel keeps fault-around (userfaultfd refused)")
	}
}

// registered reports whether the mapping holding addr is registered for
// write-protect faults with a userfaultfd ("uw" in /proc/self/smaps).
func registered(t *testing.T, addr uintptr) bool {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= addr && addr < hi
		} else if in && strings.HasPrefix(line, "VmFlags:") {
			return slices.Contains(strings.Fields(line), "uw")
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return false
}

// presentPages reads which pages of mem (page-aligned) the process's page
// tables map.
func presentPages(t *testing.T, mem []byte) []bool {
	t.Helper()
	page := unix.Getpagesize()
	entries := make([]byte, 8*(len(mem)/page))
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(entries, int64(uintptr(unsafe.Pointer(&mem[0]))/uintptr(page)*8)); err != nil {
		t.Fatal(err)
	}
	present := make([]bool, len(entries)/8)
	for i := range present {
		present[i] = binary.LittleEndian.Uint64(entries[8*i:])&(1<<63) != 0
	}
	return present
}
