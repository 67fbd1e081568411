// Package linearmem is what the runtime plugins know of a guest's linear
// memory beyond their engines: where a module's data segments put its
// initial contents, and how to hand back to the system the pages of a
// memory that hold only zeros or only what its file holds.
package linearmem

import (
	"bytes"
	"errors"
	"sync/atomic"
	"unsafe"

	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
)

// Segment is an active data segment: bytes written at offset when the
// module is instantiated.
type Segment struct {
	Offset uint32
	Bytes  []byte
}

// Layout is the initial memory of a module whose data segments can be read
// without running it.
type Layout struct {
	MinBytes uint64    // the memory's minimum
	Segments []Segment // in order: a later one overwrites an earlier one
	Data     uint64    // the segments' bytes
	End      uint64    // the end of the last segment
}

// ReadLayout reads the initial memory of a module that defines one memory
// (not shared) and imports none, whose data segments are all active in
// memory 0 at an i32.const offset, with no data count section (so no
// instruction names a segment). Any other module, or a malformed one,
// returns an error. Segments may overlap or lie past MinBytes, as the module
// says; the caller decides what that means.
func ReadLayout(wasm []byte) (Layout, error) {
	var l Layout
	if len(wasm) < len(wasmbin.Header) || !bytes.HasPrefix(wasm, wasmbin.Header[:4]) { // any version
		return l, errors.New("not a WebAssembly module")
	}
	// Numbers are read strictly: the layout can stand in for the data
	// section (the wazero plugin drops it), so it must not read one an
	// engine would refuse.
	r := wasmbin.Reader{Rest: wasm[len(wasmbin.Header):]}
	memories := -1
	for !r.Done() {
		id := r.Byte()
		s := wasmbin.Reader{Rest: r.Bytes(r.StrictU32())}
		switch id {
		case wasmbin.ImportSection:
			for n := s.StrictU32(); n > 0 && s.Err == nil; n-- {
				s.Bytes(s.StrictU32()) // module
				s.Bytes(s.StrictU32()) // name
				switch s.Byte() {
				case 0: // function: type
					s.StrictU32()
				default: // a table, memory, global or tag: too much to read here
					return l, errors.New("the module imports something other than functions")
				}
			}
		case wasmbin.MemorySection:
			memories = int(s.StrictU32())
			if flags := s.Byte(); flags&^1 != 0 {
				return l, errors.New("a shared or 64-bit memory")
			}
			l.MinBytes = uint64(s.StrictU32()) << 16
		case wasmbin.DataSection:
			for n := s.StrictU32(); n > 0 && s.Err == nil; n-- {
				if s.StrictU32() != 0 || s.Byte() != 0x41 { // active in memory 0, i32.const
					return l, errors.New("a data segment is passive or not at a constant offset")
				}
				off := uint32(s.S32())
				if s.Byte() != 0x0b { // end
					return l, errors.New("a data segment's offset is not a constant")
				}
				b := s.Bytes(s.StrictU32())
				l.Segments = append(l.Segments, Segment{off, b})
				l.End = max(l.End, uint64(off)+uint64(len(b)))
				l.Data += uint64(len(b))
			}
		case wasmbin.DataCountSection:
			return l, errors.New("a data count section")
		}
		r.Err = errors.Join(r.Err, s.Err)
	}
	switch {
	case r.Err != nil:
		return l, r.Err
	case memories != 1:
		return l, errors.New("the module does not define exactly one memory")
	}
	return l, nil
}

// Image is the memory's contents from offset 0 to End, the segments
// applied in order.
func (l Layout) Image() []byte {
	image := populate.Make(int(l.End), int(l.End))
	for _, s := range l.Segments {
		copy(image[s.Offset:], s.Bytes)
	}
	return image
}

// ReleaseAfterStart hands back what a guest's start function left in mem
// that the guest does not need resident, with no guest code running: past
// imageEnd, where the memory is anonymous, the pages that hold only zeros
// (a Go guest's runtime clears some 200 KiB of fresh memory as it starts);
// below it, where the memory is a private mapping of the module's image
// file, the pages still shared with the file (those the start only read,
// and their neighbours the kernel mapped with them). Either kind reads the
// same afterwards. It returns how many bytes that was.
func ReleaseAfterStart(mem []byte, imageEnd int) int {
	end := min(imageEnd, len(mem))
	return ReleaseZeroPages(mem[end:]) + ReleaseSharedPages(mem[:end])
}

// Touch writes each page of mem once, keeping its contents, so that the
// page faults of memory a guest has just grown happen now, on the host's
// account (runtime.AsHostWork), rather than at the guest's first access.
// Pages already written cost a memory access each. No guest code may run in
// mem meanwhile.
func Touch(mem []byte) {
	const step = 4096 // the smallest page size of the machines WasmKeep runs on
	for off := (-int(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))) & 3; off+4 <= len(mem); off += step {
		atomic.AddUint32((*uint32)(unsafe.Pointer(&mem[off])), 0) // a write that changes nothing
	}
}
