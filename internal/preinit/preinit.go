// Package preinit rewrites a module as it is once its start has run (ADR
// 1040): run the start once in an instance of Instrumented, read the
// instance's memory and the values Instrumented's GlobalsExport returns,
// and Snapshot gives a module whose data segments are that memory, whose
// mutable globals start at those values and which has no start to run. Its
// instances begin where the start left off, on any engine, without running
// it. This package only reads and writes modules; the kernel runs them.
package preinit

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
)

// Marker is the export by which a module asks to be pre-initialised (docs/abi.md).
const Marker = "wasmkeep_preinit"

// GlobalsExport is the function Instrumented adds: it returns the module's
// mutable globals, in the order they are defined.
const GlobalsExport = "wasmkeep.preinit.globals"

// startExport is the reactor's start function, which a snapshot has run.
const startExport = "_initialize"

// What a snapshot may hold. Wasmtime refuses a function of more than 1,000
// results and a module of more than 100,000 data segments; the memory cap
// keeps what the host holds while it writes and compiles a snapshot (about
// twice the memory, then the engine's copy) small, where a Go guest's start
// leaves about 4 MiB.
const (
	MaxGlobals   = 1000
	MaxMemory    = 64 << 20
	maxSegments  = 10000
	segmentBytes = 11 // the most a segment's header takes: flags, i32.const offset, end, length
)

// mergeGaps are the runs of zeros kept inside a data segment rather than
// ending it, the shortest first: a segment costs up to segmentBytes to
// declare and an engine a little per segment, so a snapshot takes the
// shortest gap that keeps it within maxSegments (the last gives at most
// MaxMemory/64 KiB).
var mergeGaps = []int{64, 4 << 10, 64 << 10}

// Module is a module read for pre-initialisation.
type Module struct {
	size     int // of the module's bytes
	sections []section
	// Imported functions and globals, and defined functions: the added
	// function's index follows them.
	importedFuncs, importedGlobals, definedFuncs uint32
	types                                        uint32 // entries of the type section
	globals                                      []global
	memFlags                                     byte
	memMin, memMax                               uint32
}

type section struct {
	id      byte
	raw     []byte // header included
	payload []byte
}

// global is one defined global.
type global struct {
	valType byte
	mutable bool
	raw     []byte // type, mutability and initialiser, as the module has them
}

// Value types a global may have here (numbers; a v128 or a reference
// cannot be returned as a number).
const (
	typeI32 = 0x7f
	typeI64 = 0x7e
	typeF32 = 0x7d
	typeF64 = 0x7c
)

// Asks reports whether wasm exports Marker, reading only its export
// section (a malformed module does not ask).
func Asks(wasm []byte) bool {
	if !bytes.HasPrefix(wasm, wasmbin.Header) {
		return false
	}
	r := wasmbin.Reader{Rest: wasm[len(wasmbin.Header):]}
	for !r.Done() {
		id, payload := r.Byte(), r.Bytes(r.U32())
		if id != wasmbin.ExportSection {
			continue
		}
		s := wasmbin.Reader{Rest: payload}
		for n := s.Count(); n > 0 && s.Err == nil; n-- {
			name := s.Bytes(s.Count())
			s.Byte()
			s.U32()
			if string(name) == Marker && s.Err == nil {
				return true
			}
		}
	}
	return false
}

// Parse reads wasm and refuses, naming why, a module it cannot snapshot:
// one that imports anything but functions, does not define exactly one
// memory, keeps passive data segments (a data count section), has a
// mutable global that is not a number, or is a command (exports _start).
func Parse(wasm []byte) (*Module, error) {
	if !bytes.HasPrefix(wasm, wasmbin.Header) {
		return nil, errors.New("not a WebAssembly module")
	}
	m := &Module{size: len(wasm)}
	memories := 0
	r := wasmbin.Reader{Rest: wasm[len(wasmbin.Header):]}
	for !r.Done() {
		start := r.Rest
		id, payload := r.Byte(), r.Bytes(r.StrictU32())
		if r.Err != nil {
			break
		}
		m.sections = append(m.sections, section{id: id, raw: start[:len(start)-len(r.Rest)], payload: payload})
		s := wasmbin.Reader{Rest: payload}
		var err error
		switch id {
		case wasmbin.TypeSection:
			m.types = s.StrictU32()
		case wasmbin.ImportSection:
			err = m.readImports(&s)
		case wasmbin.FunctionSection:
			m.definedFuncs = s.StrictU32()
		case wasmbin.MemorySection:
			if memories = int(s.StrictU32()); memories == 1 {
				m.memFlags = s.Byte()
				m.memMin = s.StrictU32()
				if m.memFlags&1 != 0 {
					m.memMax = s.StrictU32()
				}
				if m.memFlags&^1 != 0 {
					err = errors.New("its memory is shared or 64-bit")
				}
			}
		case wasmbin.GlobalSection:
			err = m.readGlobals(&s)
		case wasmbin.ExportSection:
			for n := s.StrictU32(); n > 0 && s.Err == nil; n-- {
				switch name := string(s.Bytes(s.StrictU32())); name {
				case "_start":
					err = errors.New("it is a command (it exports _start), not a reactor")
				case GlobalsExport:
					err = fmt.Errorf("it exports %s, the name pre-initialisation adds", name)
				}
				s.Byte()
				s.StrictU32()
			}
		case wasmbin.DataCountSection:
			err = errors.New("it has passive data segments (a data count section)")
		}
		if err == nil {
			err = s.Err
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", wasmbin.SectionName(id), err)
		}
	}
	if r.Err != nil {
		return nil, r.Err
	}
	if memories != 1 {
		return nil, fmt.Errorf("it defines %d memories, not one", memories)
	}
	if n := m.Globals(); n > MaxGlobals {
		return nil, fmt.Errorf("it has %d mutable globals, more than %d", n, MaxGlobals)
	}
	for _, id := range []byte{wasmbin.TypeSection, wasmbin.FunctionSection, wasmbin.ExportSection, wasmbin.CodeSection} {
		if !m.has(id) {
			return nil, fmt.Errorf("it has no %s", wasmbin.SectionName(id))
		}
	}
	return m, nil
}

func (m *Module) has(id byte) bool {
	for _, s := range m.sections {
		if s.id == id {
			return true
		}
	}
	return false
}

func (m *Module) readImports(s *wasmbin.Reader) error {
	for n := s.StrictU32(); n > 0 && s.Err == nil; n-- {
		mod := s.Bytes(s.StrictU32())
		name := s.Bytes(s.StrictU32())
		if kind := s.Byte(); kind != 0 && s.Err == nil {
			return fmt.Errorf("it imports %s.%s, which is not a function", mod, name)
		}
		s.StrictU32() // type
		m.importedFuncs++
	}
	return nil
}

func (m *Module) readGlobals(s *wasmbin.Reader) error {
	for n := s.StrictU32(); n > 0 && s.Err == nil; n-- {
		start := s.Rest
		g := global{valType: s.Byte(), mutable: s.Byte() == 1}
		skipConstExpr(s)
		g.raw = start[:len(start)-len(s.Rest)]
		if g.mutable && s.Err == nil {
			switch g.valType {
			case typeI32, typeI64, typeF32, typeF64:
			default:
				return fmt.Errorf("global %d is mutable and of type %#x, not a number", m.importedGlobals+uint32(len(m.globals)), g.valType)
			}
		}
		m.globals = append(m.globals, g)
	}
	return nil
}

// skipConstExpr reads a constant expression of WebAssembly 2.0 up to its end.
func skipConstExpr(s *wasmbin.Reader) {
	for s.Err == nil {
		switch op := s.Byte(); op {
		case 0x0b: // end
			return
		case 0x41, 0x42, 0x23, 0xd2: // i32.const, i64.const, global.get, ref.func
			s.SkipLEB()
		case 0x43: // f32.const
			s.Bytes(4)
		case 0x44: // f64.const
			s.Bytes(8)
		case 0xd0: // ref.null
			s.Byte()
		default:
			s.Failf("opcode %#x in a constant expression", op)
		}
	}
}

// Globals is how many values GlobalsExport returns.
func (m *Module) Globals() int {
	n := 0
	for _, g := range m.globals {
		if g.mutable {
			n++
		}
	}
	return n
}

// Instrumented is the module with one more function, exported as
// GlobalsExport, which returns its mutable globals' values. Every other
// index stays as it was.
func (m *Module) Instrumented() []byte {
	var results, body []byte
	body = append(body, 0) // no locals
	for i, g := range m.globals {
		if g.mutable {
			results = append(results, g.valType)
			body = wasmbin.AppendU32(append(body, 0x23), m.importedGlobals+uint32(i)) // global.get
		}
	}
	body = append(body, 0x0b)
	fn := m.importedFuncs + m.definedFuncs

	out := append([]byte(nil), wasmbin.Header...)
	for _, s := range m.sections {
		switch s.id {
		case wasmbin.TypeSection: // () -> (results)
			t := append(wasmbin.AppendU32(append([]byte{0x60}, 0), uint32(len(results))), results...)
			out = appendEntry(out, s, t)
		case wasmbin.FunctionSection:
			out = appendEntry(out, s, wasmbin.AppendU32(nil, m.types))
		case wasmbin.ExportSection:
			e := append(wasmbin.AppendU32(nil, uint32(len(GlobalsExport))), GlobalsExport...)
			out = appendEntry(out, s, wasmbin.AppendU32(append(e, 0), fn))
		case wasmbin.CodeSection:
			out = appendEntry(out, s, append(wasmbin.AppendU32(nil, uint32(len(body))), body...))
		default:
			out = append(out, s.raw...)
		}
	}
	return out
}

// appendEntry appends section s with one more entry at the end of its vector.
func appendEntry(out []byte, s section, entry []byte) []byte {
	r := wasmbin.Reader{Rest: s.payload}
	n := r.U32()
	payload := append(wasmbin.AppendU32(nil, n+1), r.Rest...)
	return wasmbin.AppendSection(out, s.id, append(payload, entry...))
}

// Snapshot is the module as its instance was after its start: mem is the
// instance's memory (a whole number of 64 KiB pages), globals what
// GlobalsExport returned (as engines pass numbers: an i32 or f32 in the
// low 32 bits). The memory's minimum becomes mem's size, its non-zero bytes
// the data segments, the mutable globals' initialisers those values; the
// start section and the _initialize export go. The tables stay as the
// module declares them: a start that changes a table is not snapshotted
// faithfully (docs/abi.md asks a module that asks for this not to).
func (m *Module) Snapshot(mem []byte, globals []uint64) ([]byte, error) {
	if len(mem)%(1<<16) != 0 {
		return nil, fmt.Errorf("memory of %d bytes is not a whole number of pages", len(mem))
	}
	if len(mem) > MaxMemory {
		return nil, fmt.Errorf("its start left %d MiB of memory, more than the %d MiB a snapshot may hold", len(mem)>>20, MaxMemory>>20)
	}
	pages := uint32(len(mem) >> 16)
	if pages < m.memMin || m.memFlags&1 != 0 && pages > m.memMax {
		return nil, fmt.Errorf("memory of %d pages is outside the module's limits (%d to %d)", pages, m.memMin, m.memMax)
	}
	if len(globals) != m.Globals() {
		return nil, fmt.Errorf("%d global values for %d mutable globals", len(globals), m.Globals())
	}
	data := dataSegments(mem)
	out := append(make([]byte, 0, m.size+len(data)+16), wasmbin.Header...)
	placedData := false
	for _, s := range m.sections {
		switch s.id {
		case wasmbin.MemorySection:
			p := wasmbin.AppendU32(append(wasmbin.AppendU32(nil, 1), m.memFlags), pages)
			if m.memFlags&1 != 0 {
				p = wasmbin.AppendU32(p, m.memMax)
			}
			out = wasmbin.AppendSection(out, s.id, p)
		case wasmbin.GlobalSection:
			out = wasmbin.AppendSection(out, s.id, m.globalsAt(globals))
		case wasmbin.ExportSection:
			out = wasmbin.AppendSection(out, s.id, withoutExport(s.payload, startExport))
		case wasmbin.StartSection:
		case wasmbin.DataSection:
			out = wasmbin.AppendSection(out, s.id, data)
			placedData = true
		default:
			out = append(out, s.raw...)
		}
	}
	if !placedData { // the data section comes last but for custom sections
		out = wasmbin.AppendSection(out, wasmbin.DataSection, data)
	}
	return out, nil
}

func (m *Module) globalsAt(values []uint64) []byte {
	p := wasmbin.AppendU32(nil, uint32(len(m.globals)))
	for _, g := range m.globals {
		if !g.mutable {
			p = append(p, g.raw...)
			continue
		}
		v := values[0]
		values = values[1:]
		p = append(p, g.valType, 1)
		switch g.valType {
		case typeI32:
			p = wasmbin.AppendS64(append(p, 0x41), int64(int32(v)))
		case typeI64:
			p = wasmbin.AppendS64(append(p, 0x42), int64(v))
		case typeF32:
			p = append(p, 0x43, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		case typeF64:
			p = append(p, 0x44)
			for i := range 8 {
				p = append(p, byte(v>>(8*i)))
			}
		}
		p = append(p, 0x0b)
	}
	return p
}

// withoutExport is an export section's payload without the export name.
func withoutExport(payload []byte, name string) []byte {
	r := wasmbin.Reader{Rest: payload}
	var kept []byte
	count := uint32(0)
	for n := r.U32(); n > 0 && r.Err == nil; n-- {
		start := r.Rest
		got := string(r.Bytes(r.U32()))
		r.Byte()
		r.U32()
		if got != name {
			kept = append(kept, start[:len(start)-len(r.Rest)]...)
			count++
		}
	}
	return append(wasmbin.AppendU32(nil, count), kept...)
}

// dataSegments is a data section's payload writing mem's non-zero bytes,
// one active segment per run: runs fewer zeros apart than the shortest of
// mergeGaps that keeps them within maxSegments are merged.
func dataSegments(mem []byte) []byte {
	var runs [][2]int
	for _, gap := range mergeGaps {
		if runs = nonZeroRuns(mem, gap, maxSegments); runs != nil {
			break
		}
	}
	size := 5
	for _, r := range runs {
		size += segmentBytes + r[1] - r[0]
	}
	p := wasmbin.AppendU32(make([]byte, 0, size), uint32(len(runs)))
	for _, r := range runs {
		p = wasmbin.AppendS64(append(p, 0, 0x41), int64(int32(uint32(r[0])))) // active, memory 0, i32.const
		p = wasmbin.AppendU32(append(p, 0x0b), uint32(r[1]-r[0]))
		p = append(p, mem[r[0]:r[1]]...)
	}
	return p
}

// nonZeroRuns returns the runs [start, end) of mem's non-zero bytes, runs
// fewer than gap zeros apart merged; nil if there are more than limit (and
// an empty, non-nil slice for a memory of zeros).
func nonZeroRuns(mem []byte, gap, limit int) [][2]int {
	runs := [][2]int{}
	for i := 0; i < len(mem); {
		if mem[i] == 0 {
			i++
			continue
		}
		start, end := i, i+1 // end: after the last non-zero byte seen
		for j := end; j < len(mem) && j-end < gap; j++ {
			if mem[j] != 0 {
				end = j + 1
			}
		}
		if len(runs) == limit && gap < mergeGaps[len(mergeGaps)-1] {
			return nil
		}
		runs = append(runs, [2]int{start, end})
		i = end
	}
	return runs
}
