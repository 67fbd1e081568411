package linearmem

import (
	"bytes"
	"testing"
)

func section(id byte, payload ...byte) []byte {
	return append([]byte{id, byte(len(payload))}, payload...)
}

func module(sections ...[]byte) []byte {
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

var (
	memory1 = section(5, 1, 0, 1)                                                        // one memory, min 1 page
	data    = section(11, 2, 0, 0x41, 4, 0x0b, 2, 'a', 'b', 0, 0x41, 0x7f, 0x0b, 1, 'c') // "ab" at 4, "c" at -1
)

func TestReadLayout(t *testing.T) {
	l, err := ReadLayout(module(memory1, data))
	if err != nil {
		t.Fatal(err)
	}
	if l.MinBytes != 65536 || len(l.Segments) != 2 || l.Data != 3 || l.End != 1<<32 {
		t.Errorf("layout %+v", l)
	}
	if s := l.Segments[1]; s.Offset != 1<<32-1 || string(s.Bytes) != "c" {
		t.Errorf("second segment %+v, want \"c\" at 2^32-1 (i32.const -1)", s)
	}
	small, err := ReadLayout(module(memory1, section(11, 2, 0, 0x41, 4, 0x0b, 2, 'a', 'b', 0, 0x41, 5, 0x0b, 1, 'c')))
	if err != nil {
		t.Fatal(err)
	}
	if got := small.Image(); !bytes.Equal(got, []byte{0, 0, 0, 0, 'a', 'c'}) {
		t.Errorf("image %q: segments apply in order", got)
	}

	for name, wasm := range map[string][]byte{
		"not wasm":        []byte("\x00elf"),
		"no memory":       module(data),
		"two memories":    module(section(5, 2, 0, 1, 0, 1), data),
		"shared memory":   module(section(5, 1, 3, 1, 1), data),
		"imported memory": module(section(2, 1, 1, 'm', 1, 'm', 2, 0, 1), data),
		"passive segment": module(memory1, section(11, 1, 1, 1, 'x')),
		"global offset":   module(memory1, section(11, 1, 0, 0x23, 0, 0x0b, 1, 'x')),
		"data count":      module(memory1, section(12, 1), section(11, 1, 0, 0x41, 0, 0x0b, 1, 'x')),
		"truncated":       module(memory1, section(11, 1, 0, 0x41, 0, 0x0b, 9, 'x')),
		"long offset":     module(memory1, section(11, 1, 0, 0x41, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x0b, 1, 'x')),
		"wide length":     module(memory1, section(11, 1, 0, 0x41, 0, 0x0b, 0x80, 0x80, 0x80, 0x80, 0x10)), // bit 33 set
	} {
		if l, err := ReadLayout(wasm); err == nil {
			t.Errorf("%s: read %+v, want an error", name, l)
		}
	}
}

func FuzzReadLayout(f *testing.F) {
	f.Add(module(memory1, data))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		l, err := ReadLayout(wasm)
		if err == nil && l.End < 1<<20 {
			l.Image() // never panics
		}
	})
}
