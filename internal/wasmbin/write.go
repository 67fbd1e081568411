package wasmbin

// AppendSection appends a section: its id, its payload's length, the payload.
func AppendSection(b []byte, id byte, payload []byte) []byte {
	return append(AppendU32(append(b, id), uint32(len(payload))), payload...)
}

// AppendU32 appends v in unsigned LEB128.
func AppendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// AppendS64 appends v in signed LEB128, as i64.const takes it, and
// i32.const an int32 v.
func AppendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
