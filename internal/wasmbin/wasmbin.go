// Package wasmbin reads the WebAssembly binary format: bytes, LEB128
// numbers, vector lengths and value types. It is the one reader that
// linearmem, wasmbounds and the wazero plugin build their own reading of
// sections and instructions on.
package wasmbin

import (
	"errors"
	"fmt"
)

// Reader reads a binary module from Rest. Past the end or at a malformed
// number it keeps the first error in Err, drops what is left and from then
// on reads zeros.
type Reader struct {
	Rest []byte // what is left to read
	Err  error  // the first failure
}

var (
	errTruncated = errors.New("truncated module")
	errTooLong   = errors.New("integer representation too long")
	errTooLarge  = errors.New("integer too large")
	errBadSigned = errors.New("bad signed number")
)

// Done reports whether reading stopped: everything was read, or it failed.
func (r *Reader) Done() bool { return r.Err != nil || len(r.Rest) == 0 }

// Failf fails the reader with an error formatted as fmt.Errorf does,
// unless it failed already.
func (r *Reader) Failf(format string, args ...any) {
	r.fail(fmt.Errorf(format, args...))
}

func (r *Reader) fail(err error) {
	if r.Err == nil {
		r.Err = err
	}
	r.Rest = nil
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.Rest) == 0 {
		r.fail(errTruncated)
		return 0
	}
	c := r.Rest[0]
	r.Rest = r.Rest[1:]
	return c
}

// Bytes reads n bytes; they are not copied.
func (r *Reader) Bytes(n uint32) []byte {
	if uint64(n) > uint64(len(r.Rest)) {
		r.fail(errTruncated)
		return nil
	}
	b := r.Rest[:n]
	r.Rest = r.Rest[n:]
	return b
}

// U32 reads an unsigned LEB128 number of up to 5 bytes. Bits past the 32nd
// are dropped: the engines refuse such a number, which is enough for a
// reader that only bounds or skips what it reads.
func (r *Reader) U32() uint32 { return r.u32(false) }

// StrictU32 is U32 refusing a number with bits past the 32nd, for a reader
// whose result stands in for what it read.
func (r *Reader) StrictU32() uint32 { return r.u32(true) }

func (r *Reader) u32(strict bool) uint32 {
	var v uint32
	for i := range 5 {
		c := r.Byte()
		if strict && i == 4 && c&0x70 != 0 {
			r.fail(errTooLarge)
			return 0
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail(errTooLong)
	return 0
}

// S32 reads a signed LEB128 number of up to 32 bits.
func (r *Reader) S32() int32 {
	var v int32
	for i := 0; ; i++ {
		c := r.Byte()
		v |= int32(c&0x7f) << (7 * i)
		switch {
		case i == 4 && c&0x78 != 0 && c&0x78 != 0x78, i == 4 && c&0x80 != 0: // bits past 32 must extend the sign
			r.fail(errBadSigned)
			return 0
		case c&0x80 == 0:
			if i < 4 && c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return v
		}
	}
}

// SkipLEB skips a signed or unsigned LEB128 number of up to 10 bytes.
func (r *Reader) SkipLEB() {
	for range 10 {
		if r.Byte()&0x80 == 0 {
			return
		}
	}
	r.fail(errTooLong)
}

// Count reads the length of a vector, which may not promise more entries
// than there are bytes left: each takes one at least.
func (r *Reader) Count() uint32 {
	n := r.U32()
	if uint64(n) > uint64(len(r.Rest)) {
		r.Failf("a vector of %d entries in %d bytes", n, len(r.Rest))
		return 0
	}
	return n
}

// ValueType reads a value type: one byte, or a reference type's two forms
// of the function references proposal followed by a heap type.
func (r *Reader) ValueType() {
	if t := r.Byte(); t == 0x63 || t == 0x64 {
		r.SkipLEB()
	}
}

// Locals reads a function body's local declarations and returns how many
// locals they declare in all.
func (r *Reader) Locals() uint64 {
	var n uint64
	for groups := r.Count(); groups > 0 && r.Err == nil; groups-- {
		n += uint64(r.U32())
		r.ValueType()
	}
	return n
}
