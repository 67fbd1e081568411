package wazeroruntime

import (
	"fmt"

	"github.com/wasmkeep/wasmkeep/internal/linearmem"
	"github.com/wasmkeep/wasmkeep/internal/populate"
	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
	"github.com/wasmkeep/wasmkeep/internal/wasmbounds"
)

// prepare checks and rewrites a module before wazero sees it, for these
// reasons, all about wazero v1.12.0 and guests nobody trusts:
//
//   - wazero cannot stop a compile, and some modules take minutes or
//     gigabytes to compile: prepare refuses those first (wasmbounds.Check,
//     which the wasmtime plugin calls too), and those no instance of which
//     could be made (a memory's minimum above the limit, too many or too
//     large tables).
//   - wazero's decoder allocates a vector as soon as it reads its length, so
//     a 15-byte module declaring 2^32 data segments makes the process die
//     out of memory. prepare reads the structure of every section (all but
//     the instructions) and refuses any length longer than the bytes left.
//   - table.grow is bounded only by a table's declared maximum, and a table
//     element takes 8 bytes: one instruction could ask for 32 GiB. prepare
//     caps every table (wasmbounds.MaxTables, MaxTableElements).
//   - wazero copies a module's data segments into every instance's memory
//     and keeps a slice header per segment and instance: a standard Go
//     guest has about 28,000 segments (650 KiB of slice headers per
//     instance) over 1.1 MiB of memory. prepare takes the segments out of a
//     module that only initialises its own memory, and gives their bytes as
//     one image, which instances map copy-on-write (see memoryImage).
//   - wazero checks whether a ctx stopped the guest only at loop headers, so
//     a guest whose calls fan out without looping (naive recursive
//     Fibonacci, say) would run on long after its ctx is done (wazero PR
//     #2533 names the gap). prepare starts every function by counting down
//     a global of its own and, every checkPeriod calls, running an empty
//     loop, whose header is such a check. A check exits to Go (~70 ns): that
//     is why it does not run on every call.
//
// What prepare misreads makes a module wazero refuses, never one that
// escapes the checks.

const (
	checkPeriod = 1024
)

// Import and export kinds.
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
	kindTag    = 4
)

// rawImport is one import as the binary declares it.
type rawImport struct {
	module, name string
	kind         byte
}

// prepared is a module ready for wazero.
type prepared struct {
	wasm    []byte
	imports []rawImport // in declaration order
	// image is the initial contents of the module's memory from offset 0,
	// which its data segments (no longer in wasm) wrote; nil if the module
	// keeps its data segments.
	image []byte
}

// section is one section of a binary module.
type section struct {
	id      byte
	raw     []byte // header included
	payload []byte
}

func prepare(wasm []byte, memoryLimitPages uint32) (*prepared, error) {
	if err := wasmbounds.Check(wasm, memoryLimitPages); err != nil {
		return nil, err
	}
	var secs []section
	r := wasmbin.Reader{Rest: wasm[len(wasmbin.Header):]}
	for !r.Done() {
		start := r.Rest
		id, payload := r.Byte(), r.Bytes(r.U32())
		if r.Err == nil {
			secs = append(secs, section{id: id, raw: start[:len(start)-len(r.Rest)], payload: payload})
		}
	}
	if r.Err != nil {
		return nil, r.Err
	}

	p := &prepared{}
	var importedGlobals uint32
	var globals, tables []byte // rewritten payloads
	hasCode := false
	for _, s := range secs {
		var err error
		switch s.id {
		case wasmbin.ImportSection:
			p.imports, err = readImports(s.payload)
			for _, imp := range p.imports {
				importedGlobals += b2u(imp.kind == kindGlobal)
			}
		case wasmbin.TableSection:
			tables, err = capTables(s.payload)
		case wasmbin.GlobalSection:
			globals, err = s.payload, checkOther(s.id, s.payload)
		case wasmbin.CodeSection:
			hasCode = true // checked as it is instrumented
		default:
			err = checkOther(s.id, s.payload)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", wasmbin.SectionName(s.id), err)
		}
	}

	p.image = memoryImage(wasm)

	// The counter goes last among the globals: no index changes.
	var counter uint32
	if hasCode {
		if globals == nil {
			globals = []byte{0}
		}
		r := wasmbin.Reader{Rest: globals}
		defined := r.U32()
		counter = importedGlobals + defined
		rest := r.Rest
		globals = wasmbin.AppendU32(nil, defined+1)
		globals = append(globals, rest...)
		globals = append(globals, 0x7f, 0x01, 0x41) // mutable i32, i32.const
		globals = append(wasmbin.AppendS64(globals, checkPeriod), 0x0b)
	}

	out := append(populate.Make(0, len(wasm)+len(wasm)/8), wasmbin.Header...)
	placedGlobals := globals == nil
	for _, s := range secs {
		if !placedGlobals && (s.id == wasmbin.GlobalSection || afterGlobals(s.id)) {
			out = wasmbin.AppendSection(out, wasmbin.GlobalSection, globals)
			placedGlobals = true
		}
		switch s.id {
		case wasmbin.GlobalSection:
		case wasmbin.DataSection:
			if p.image == nil {
				out = append(out, s.raw...)
			}
		case wasmbin.TableSection:
			out = wasmbin.AppendSection(out, wasmbin.TableSection, tables)
		case wasmbin.CodeSection:
			code, err := instrumentCode(s.payload, prologue(counter))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", wasmbin.SectionName(s.id), err)
			}
			out = wasmbin.AppendSection(out, wasmbin.CodeSection, code)
		default:
			out = append(out, s.raw...)
		}
	}
	p.wasm = out
	return p, nil
}

// memoryImage returns the initial contents of the memory a module defines,
// from offset 0 to the end of its last data segment, if every segment can
// be replaced by it (see linearmem.ReadLayout) and lies within the memory's
// minimum (else instantiating must fail, as wazero will say). It returns
// nil otherwise, or if the image would be mostly empty (more than twice its
// bytes plus 1 MiB), so that a small module never makes the host hold a
// large image.
func memoryImage(wasm []byte) []byte {
	l, err := linearmem.ReadLayout(wasm)
	if err != nil || len(l.Segments) == 0 || l.End > l.MinBytes || l.End > 2*l.Data+1<<20 {
		return nil
	}
	return l.Image()
}

// afterGlobals reports whether sections with id come after the global
// section: export, start, element, data count, code, data.
func afterGlobals(id byte) bool { return id >= wasmbin.ExportSection && id <= wasmbin.DataCountSection }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// checkSection reads a vector section whose entries entry reads, and
// checks it reads the whole payload.
func checkSection(payload []byte, entry func(*reader)) error {
	r := reader{wasmbin.Reader{Rest: payload}}
	for n := r.Count(); n > 0 && r.Err == nil; n-- {
		entry(&r)
	}
	return r.end()
}

// checkOther reads a section, but for the import, table and code sections.
func checkOther(id byte, payload []byte) error {
	r := reader{wasmbin.Reader{Rest: payload}}
	switch id {
	case wasmbin.CustomSection:
		if r.name() == "name" {
			r.nameSection()
		} else {
			r.Rest = nil // wazero keeps neither custom sections nor DWARF here
		}
		return r.end()
	case wasmbin.TypeSection:
		return checkSection(payload, func(r *reader) {
			if r.Byte() != 0x60 {
				r.Failf("function type does not start with 0x60")
			}
			for range 2 { // parameters, results
				for n := r.Count(); n > 0 && r.Err == nil; n-- {
					r.ValueType()
				}
			}
		})
	case wasmbin.FunctionSection:
		return checkSection(payload, func(r *reader) { r.U32() })
	case wasmbin.MemorySection:
		return checkSection(payload, func(r *reader) { r.limits() })
	case wasmbin.GlobalSection:
		return checkSection(payload, func(r *reader) {
			r.ValueType()
			r.Byte() // mutability
			r.constExpr()
		})
	case wasmbin.TagSection:
		return checkSection(payload, func(r *reader) { r.Byte(); r.U32() })
	case wasmbin.ExportSection:
		return checkSection(payload, func(r *reader) { r.name(); r.Byte(); r.U32() })
	case wasmbin.StartSection, wasmbin.DataCountSection:
		r.U32()
		return r.end()
	case wasmbin.ElementSection:
		return checkSection(payload, (*reader).element)
	case wasmbin.DataSection:
		return checkSection(payload, func(r *reader) {
			switch r.U32() {
			case 0:
				r.constExpr()
			case 1:
			case 2:
				r.U32() // memory
				r.constExpr()
			default:
				r.Failf("unknown data segment kind")
			}
			r.Bytes(r.Count()) // the bytes
		})
	}
	return fmt.Errorf("unknown section id")
}

func readImports(payload []byte) ([]rawImport, error) {
	var out []rawImport
	err := checkSection(payload, func(r *reader) {
		imp := rawImport{module: r.name(), name: r.name(), kind: r.Byte()}
		switch imp.kind {
		case kindFunc:
			r.U32() // type
		case kindTable:
			r.tableType()
		case kindMemory:
			r.limits()
		case kindGlobal:
			r.ValueType()
			r.Byte() // mutability
		case kindTag:
			r.Byte() // attribute
			r.U32()  // type
		default:
			r.Failf("unknown import kind %#x", imp.kind)
		}
		out = append(out, imp)
	})
	return out, err
}

// capTables returns the table section with every table's maximum capped at
// wasmbounds.MaxTableElements (wasmbounds.Check refused a larger minimum,
// and more than wasmbounds.MaxTables tables).
func capTables(payload []byte) ([]byte, error) {
	r := reader{wasmbin.Reader{Rest: payload}}
	n := r.Count()
	out := wasmbin.AppendU32(nil, n)
	for ; n > 0 && r.Err == nil; n-- {
		start := r.Rest
		init := r.tableRef()
		out = append(out, start[:len(start)-len(r.Rest)]...)
		flags, min, max := r.limits()
		if flags&1 == 0 || max > wasmbounds.MaxTableElements {
			max = wasmbounds.MaxTableElements
		}
		out = wasmbin.AppendU32(wasmbin.AppendU32(append(out, flags|1), min), max)
		if init {
			start = r.Rest
			r.constExpr()
			out = append(out, start[:len(start)-len(r.Rest)]...)
		}
	}
	return out, r.end()
}

// prologue counts global g down and, when it is spent, runs the check and
// resets it.
func prologue(g uint32) []byte {
	get := wasmbin.AppendU32([]byte{0x23}, g)                           // global.get g
	set := wasmbin.AppendU32([]byte{0x24}, g)                           // global.set g
	p := append(append([]byte(nil), get...), 0x45, 0x04, 0x40)          // i32.eqz; if
	p = append(p, 0x03, 0x40, 0x0b)                                     // loop end: the check
	p = append(wasmbin.AppendS64(append(p, 0x41), checkPeriod), set...) // i32.const checkPeriod; global.set
	p = append(append(p, 0x05), get...)                                 // else
	p = append(p, 0x41, 0x01, 0x6b)                                     // i32.const 1; i32.sub
	p = append(p, set...)
	return append(p, 0x0b) // end
}

// instrumentCode puts prologue at the start of every body of a code
// section's payload, after the locals (wasmbounds.Check counted them: wazero
// allocates them before validating).
func instrumentCode(payload, prologue []byte) ([]byte, error) {
	r := reader{wasmbin.Reader{Rest: payload}}
	n := r.Count()
	out := wasmbin.AppendU32(populate.Make(0, len(payload)+int(n)*(len(prologue)+1)), n)
	for i := uint32(0); i < n && r.Err == nil; i++ {
		size := r.U32()
		body := r.Bytes(size)
		if r.Err != nil {
			break
		}
		locals := wasmbin.Reader{Rest: body}
		locals.Locals()
		if locals.Err != nil {
			return nil, fmt.Errorf("function %d: %w", i, locals.Err)
		}
		decl := len(body) - len(locals.Rest)
		out = wasmbin.AppendU32(out, size+uint32(len(prologue)))
		out = append(out, body[:decl]...)
		out = append(out, prologue...)
		out = append(out, body[decl:]...)
	}
	return out, r.end()
}

// reader reads what sections hold beyond wasmbin's numbers and vectors.
type reader struct{ wasmbin.Reader }

// end checks that everything was read.
func (r *reader) end() error {
	if r.Err == nil && len(r.Rest) > 0 {
		return fmt.Errorf("%d bytes left over", len(r.Rest))
	}
	return r.Err
}

func (r *reader) name() string { return string(r.Bytes(r.Count())) }

func (r *reader) limits() (flags byte, min, max uint32) {
	flags = r.Byte()
	if flags > 3 {
		r.Failf("unknown limits flags %#x", flags)
	}
	min = r.U32()
	if flags&1 != 0 {
		max = r.U32()
	}
	return flags, min, max
}

// tableRef reads the start of a table type, up to its limits; init says
// an initializer follows them.
func (r *reader) tableRef() (init bool) {
	b := r.Byte()
	if b == 0x40 {
		r.Byte() // reserved
		init = true
		b = r.Byte()
	}
	if b == 0x63 || b == 0x64 {
		r.SkipLEB()
	}
	return init
}

func (r *reader) tableType() {
	init := r.tableRef()
	r.limits()
	if init {
		r.constExpr()
	}
}

// constExpr reads a constant expression, through its end.
func (r *reader) constExpr() {
	for r.Err == nil {
		switch op := r.Byte(); op {
		case 0x0b: // end
			return
		case 0x41, 0x42, 0x23, 0xd0, 0xd2: // i32.const, i64.const, global.get, ref.null, ref.func
			r.SkipLEB()
		case 0x43: // f32.const
			r.Bytes(4)
		case 0x44: // f64.const
			r.Bytes(8)
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		case 0xfd: // v128.const
			if r.Byte() != 0x0c {
				r.Failf("not a constant instruction")
			}
			r.Bytes(16)
		default:
			r.Failf("not a constant instruction: %#x", op)
		}
	}
}

// element reads an element segment.
func (r *reader) element() {
	kind := r.U32()
	if kind > 7 {
		r.Failf("unknown element segment kind %d", kind)
		return
	}
	if kind&3 == 2 {
		r.U32() // table
	}
	if kind&1 == 0 {
		r.constExpr() // offset
	}
	if kind&3 != 0 { // element kind or reference type
		r.ValueType()
	}
	for n := r.Count(); n > 0 && r.Err == nil; n-- {
		if kind&4 == 0 {
			r.U32() // function
		} else {
			r.constExpr()
		}
	}
}

// nameSection reads the "name" custom section's subsections. wazero decodes
// the module, function and local names.
func (r *reader) nameSection() {
	for !r.Done() {
		id, payload := r.Byte(), r.Bytes(r.U32())
		if r.Err != nil {
			return
		}
		sub := reader{wasmbin.Reader{Rest: payload}}
		switch id {
		case 0:
			sub.name()
		case 1:
			for n := sub.Count(); n > 0 && sub.Err == nil; n-- {
				sub.U32()
				sub.name()
			}
		case 2:
			for n := sub.Count(); n > 0 && sub.Err == nil; n-- {
				sub.U32()
				for m := sub.Count(); m > 0 && sub.Err == nil; m-- {
					sub.U32()
					sub.name()
				}
			}
		default:
			sub.Rest = nil
		}
		if err := sub.end(); err != nil {
			r.Failf("name section: %w", err)
		}
	}
}
