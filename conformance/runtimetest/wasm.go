package runtimetest

import (
	"fmt"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// This file writes the suite's guests as WebAssembly binaries: just enough of
// the format for small hand-written functions, so the suite needs no
// assembler. Each function body is a list of instructions built with the
// helpers below; end is appended.

// wasmModule is a module under construction. Imports must be added before
// functions, since function indices count imports first.
type wasmModule struct {
	types   []runtime.Signature
	imports [][]byte // encoded entries
	nFuncs  uint32   // imported and defined functions
	funcs   []uint32 // type index per defined function
	code    [][]byte // body per defined function
	exports [][]byte
	memory  []byte // encoded limits, nil for none
	globals [][]byte
	data    [][]byte
	start   []byte // the start section's payload, nil for none
}

// sig parses a signature like "ii>I": i i32, I i64, f f32, F f64.
func sig(s string) runtime.Signature {
	var out runtime.Signature
	dst := &out.Params
	for _, c := range s {
		switch c {
		case 'i':
			*dst = append(*dst, runtime.I32)
		case 'I':
			*dst = append(*dst, runtime.I64)
		case 'f':
			*dst = append(*dst, runtime.F32)
		case 'F':
			*dst = append(*dst, runtime.F64)
		case '>':
			dst = &out.Results
		default:
			panic(fmt.Sprintf("sig %q: unknown type %q", s, c))
		}
	}
	return out
}

func (m *wasmModule) typeIndex(s runtime.Signature) uint32 {
	m.types = append(m.types, s)
	return uint32(len(m.types) - 1)
}

// importFunc imports a function and returns its index.
func (m *wasmModule) importFunc(module, name string, s runtime.Signature) uint32 {
	if len(m.funcs) > 0 {
		panic("imports must come before functions")
	}
	m.imports = append(m.imports, cat(str(module), str(name), []byte{0x00}, uleb(uint32(m.typeIndex(s)))))
	m.nFuncs++
	return m.nFuncs - 1
}

// importOther imports a table (kind 1), memory (2) or global (3) described
// by desc.
func (m *wasmModule) importOther(module, name string, kind byte, desc ...byte) {
	m.imports = append(m.imports, cat(str(module), str(name), []byte{kind}, desc))
}

// function defines a function, exported as export unless that is empty, and
// returns its index.
func (m *wasmModule) function(export string, s runtime.Signature, locals []runtime.ValueType, body ...[]byte) uint32 {
	idx := m.nFuncs
	m.nFuncs++
	m.funcs = append(m.funcs, m.typeIndex(s))
	code := uleb(uint32(len(locals)))
	for _, l := range locals {
		code = append(code, 1, byte(l)) // one local of type l
	}
	code = append(append(code, cat(body...)...), opEnd)
	m.code = append(m.code, code)
	if export != "" {
		m.exports = append(m.exports, cat(str(export), []byte{0x00}, uleb(uint32(idx))))
	}
	return idx
}

// forward defines an export that calls function f with its own parameters,
// to let the suite call an import (a WASI function) directly.
func (m *wasmModule) forward(export string, f uint32, s runtime.Signature) {
	var body [][]byte
	for i := range s.Params {
		body = append(body, localGet(uint32(i)))
	}
	m.function(export, s, nil, append(body, callFunc(f))...)
}

// defineMemory defines memory 0 with min pages and, if max >= 0, a maximum,
// exported as "memory" if export.
func (m *wasmModule) defineMemory(min uint32, max int64, export bool) {
	m.memory = limits(min, max)
	if export {
		m.exports = append(m.exports, cat(str("memory"), []byte{0x02, 0x00}))
	}
}

// global defines a mutable i32 global holding init and returns its index.
// Globals must not be imported.
func (m *wasmModule) global(init int32) uint32 {
	m.globals = append(m.globals, cat([]byte{byte(runtime.I32), 0x01}, i32Const(init), []byte{opEnd}))
	return uint32(len(m.globals) - 1)
}

// dataAt initializes memory at offset with b.
func (m *wasmModule) dataAt(offset uint32, b []byte) {
	m.data = append(m.data, cat([]byte{0x00}, i32Const(int32(offset)), []byte{opEnd}, uleb(uint32(len(b))), b))
}

func (m *wasmModule) bytes() []byte {
	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	var types [][]byte
	for _, t := range m.types {
		types = append(types, cat([]byte{0x60}, valTypes(t.Params), valTypes(t.Results)))
	}
	out = append(out, section(1, vec(types))...)
	if len(m.imports) > 0 {
		out = append(out, section(2, vec(m.imports))...)
	}
	var funcs [][]byte
	for _, t := range m.funcs {
		funcs = append(funcs, uleb(uint32(t)))
	}
	out = append(out, section(3, vec(funcs))...)
	if m.memory != nil {
		out = append(out, section(5, vec([][]byte{m.memory}))...)
	}
	if len(m.globals) > 0 {
		out = append(out, section(6, vec(m.globals))...)
	}
	out = append(out, section(7, vec(m.exports))...)
	if m.start != nil {
		out = append(out, section(8, m.start)...)
	}
	var code [][]byte
	for _, c := range m.code {
		code = append(code, cat(uleb(uint32(len(c))), c))
	}
	out = append(out, section(10, vec(code))...)
	if len(m.data) > 0 {
		out = append(out, section(11, vec(m.data))...)
	}
	return out
}

func section(id byte, payload []byte) []byte {
	return cat([]byte{id}, uleb(uint32(len(payload))), payload)
}

func vec(items [][]byte) []byte { return cat(append([][]byte{uleb(uint32(len(items)))}, items...)...) }

func str(s string) []byte { return cat(uleb(uint32(len(s))), []byte(s)) }

func valTypes(ts []runtime.ValueType) []byte {
	out := uleb(uint32(len(ts)))
	for _, t := range ts {
		out = append(out, byte(t))
	}
	return out
}

// limits encodes memory or table limits; max < 0 means none.
func limits(min uint32, max int64) []byte {
	if max < 0 {
		return cat([]byte{0x00}, uleb(uint32(min)))
	}
	return cat([]byte{0x01}, uleb(uint32(min)), uleb(uint32(max)))
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func uleb(v uint32) []byte { return wasmbin.AppendU32(nil, v) }

// Opcodes used as single bytes.
const (
	opUnreachable = 0x00
	opBlock       = 0x02
	opLoop        = 0x03
	opEnd         = 0x0b
	opDrop        = 0x1a
	opI32Eqz      = 0x45
	opI32Add      = 0x6a
	opI32Sub      = 0x6b
	opI64Add      = 0x7c
	blockVoid     = 0x40 // the type of a block that takes and yields nothing
)

func op(codes ...byte) []byte       { return codes }
func i32Const(v int32) []byte       { return wasmbin.AppendS64([]byte{0x41}, int64(v)) }
func i64Const(v int64) []byte       { return wasmbin.AppendS64([]byte{0x42}, v) }
func localGet(i uint32) []byte      { return cat([]byte{0x20}, uleb(uint32(i))) }
func localSet(i uint32) []byte      { return cat([]byte{0x21}, uleb(uint32(i))) }
func globalGet(i uint32) []byte     { return cat([]byte{0x23}, uleb(uint32(i))) }
func globalSet(i uint32) []byte     { return cat([]byte{0x24}, uleb(uint32(i))) }
func callFunc(f uint32) []byte      { return cat([]byte{0x10}, uleb(uint32(f))) }
func br(depth uint32) []byte        { return cat([]byte{0x0c}, uleb(uint32(depth))) }
func brIf(depth uint32) []byte      { return cat([]byte{0x0d}, uleb(uint32(depth))) }
func i32Load(offset uint32) []byte  { return cat([]byte{0x28, 2}, uleb(uint32(offset))) }
func i32Store(offset uint32) []byte { return cat([]byte{0x36, 2}, uleb(uint32(offset))) }
func memoryGrow() []byte            { return []byte{0x40, 0x00} }
func memorySize() []byte            { return []byte{0x3f, 0x00} }

func block(body ...[]byte) []byte {
	return cat([]byte{opBlock, blockVoid}, cat(body...), []byte{opEnd})
}

func loop(body ...[]byte) []byte {
	return cat([]byte{opLoop, blockVoid}, cat(body...), []byte{opEnd})
}
