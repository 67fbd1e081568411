// Package linearmem is what the runtime plugins know of a guest's linear
// memory beyond their engines: where a module's data segments put its
// initial contents, and how to hand back to the system the pages of a
// memory that hold only zeros or only what its file holds.
package linearmem

import (
	"encoding/binary"
	"errors"
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
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return l, errors.New("not a WebAssembly module")
	}
	r := reader{b: wasm[8:]}
	memories := -1
	for len(r.b) > 0 && r.err == nil {
		id := r.byte()
		s := reader{b: r.bytes(r.uleb())}
		switch id {
		case 2: // import
			for n := s.uleb(); n > 0 && s.err == nil; n-- {
				s.bytes(s.uleb()) // module
				s.bytes(s.uleb()) // name
				switch s.byte() {
				case 0: // function: type
					s.uleb()
				default: // a table, memory, global or tag: too much to read here
					return l, errors.New("the module imports something other than functions")
				}
			}
		case 5: // memory
			memories = int(s.uleb())
			if flags := s.byte(); flags&^1 != 0 {
				return l, errors.New("a shared or 64-bit memory")
			}
			l.MinBytes = s.uleb() << 16
		case 11: // data
			for n := s.uleb(); n > 0 && s.err == nil; n-- {
				if s.uleb() != 0 || s.byte() != 0x41 { // active in memory 0, i32.const
					return l, errors.New("a data segment is passive or not at a constant offset")
				}
				off := uint32(s.sleb32())
				if s.byte() != 0x0b { // end
					return l, errors.New("a data segment's offset is not a constant")
				}
				b := s.bytes(s.uleb())
				l.Segments = append(l.Segments, Segment{off, b})
				l.End = max(l.End, uint64(off)+uint64(len(b)))
				l.Data += uint64(len(b))
			}
		case 12: // data count
			return l, errors.New("a data count section")
		}
		r.err = errors.Join(r.err, s.err)
	}
	switch {
	case r.err != nil:
		return l, r.err
	case memories != 1:
		return l, errors.New("the module does not define exactly one memory")
	}
	return l, nil
}

// Image is the memory's contents from offset 0 to End, the segments
// applied in order.
func (l Layout) Image() []byte {
	image := make([]byte, l.End)
	for _, s := range l.Segments {
		copy(image[s.Offset:], s.Bytes)
	}
	return image
}

// reader reads a binary module: past the end or a malformed number it keeps
// an error and reads zeros.
type reader struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated module")

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail(errTruncated)
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

// uleb reads an unsigned LEB128 number of up to 32 bits.
func (r *reader) uleb() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || n > 5 || v > 1<<32-1 {
		r.fail(errors.New("bad unsigned number"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// sleb32 reads a signed LEB128 number of up to 32 bits.
func (r *reader) sleb32() int32 {
	var v int32
	for i := 0; i < 5; i++ {
		c := r.byte()
		v |= int32(c&0x7f) << (7 * i)
		switch {
		case i == 4 && c&0x78 != 0 && c&0x78 != 0x78, i == 4 && c&0x80 != 0: // bits past 32 must extend the sign
			r.fail(errors.New("bad signed number"))
			return 0
		case c&0x80 == 0:
			if i < 4 && c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return v
		}
	}
	return v
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
