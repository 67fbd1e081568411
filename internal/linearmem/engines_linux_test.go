package linearmem_test

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

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
			m, err := e.Compile(t.Context(), zeroingGuest())
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(t.Context())
			in, err := m.Instantiate(t.Context(), runtime.InstanceConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close(t.Context())
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
}
