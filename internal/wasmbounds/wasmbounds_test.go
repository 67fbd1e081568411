package wasmbounds

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
)

func uleb(v int) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// module is a module of one type () -> () and a function of that type per
// body (locals and instructions, without the final end).
func module(bodies ...[]byte) []byte {
	return moduleParams(0, bodies...)
}

// moduleParams is module with a type of params i32 parameters.
func moduleParams(params int, bodies ...[]byte) []byte {
	code := uleb(len(bodies))
	funcs := uleb(len(bodies))
	for _, b := range bodies {
		code = append(append(code, uleb(len(b)+1)...), b...)
		code = append(code, 0x0b)
		funcs = append(funcs, 0)
	}
	wasm := append([]byte(nil), wasmbin.Header...)
	typ := append(append([]byte{1, 0x60}, uleb(params)...), bytes.Repeat([]byte{0x7f}, params)...)
	wasm = append(append(append(wasm, 1), uleb(len(typ)+1)...), append(typ, 0)...)
	wasm = append(append(append(wasm, 3), uleb(len(funcs))...), funcs...)
	return append(append(append(wasm, wasmbin.CodeSection), uleb(len(code))...), code...)
}

// blocks is a body without locals that opens n nested blocks.
func blocks(n int) []byte {
	return nested(0, 0x02, n)
}

// nested is a body of locals i32 locals and n nested blocks (op 0x02) or
// loops (0x03).
func nested(locals int, op byte, n int) []byte {
	body := append([]byte{1}, uleb(locals)...)
	body = append(append(body, 0x7f), bytes.Repeat([]byte{op, 0x40}, n)...)
	return append(body, bytes.Repeat([]byte{0x0b}, n)...)
}

func TestCheck(t *testing.T) {
	ifElse := append([]byte{0}, bytes.Repeat([]byte{0x41, 0x00, 0x04, 0x40, 0x05, 0x0b}, MaxBlocks/2)...)
	// Every kind of immediate, once, holding 6 (not an opcode) where it
	// can: a misread one would trip the unknown-opcode check.
	immediates := []byte{0,
		0x02, 0x40, 0x0c, 0x00, 0x0d, 0x00, 0x0e, 0x02, 0x00, 0x00, 0x00, 0x0b, // block, br, br_if, br_table
		0x41, 0x80, 0x80, 0x04, 0x42, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, // i32.const, i64.const
		0x43, 6, 6, 6, 6, 0x44, 6, 6, 6, 6, 6, 6, 6, 6, // f32.const, f64.const
		0x28, 0x02, 0x80, 0x01, 0x3f, 0x00, 0x40, 0x00, 0x11, 0x00, 0x00, 0x1c, 0x01, 0x7f, // load, memory.*, call_indirect, select t
		0xd0, 0x70, 0xd2, 0x00, 0x25, 0x00, // ref.null, ref.func, table.get
		0xfc, 0x00, 0xfc, 0x08, 0x00, 0x00, 0xfc, 0x0b, 0x00, 0xfc, 0x0e, 0x00, 0x00, // trunc_sat, memory.init, memory.fill, table.copy
		0xfd, 0x0c, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, // v128.const
		0xfd, 0x15, 6, 0xfd, 0x54, 0x00, 0x00, 6, 0xfd, 0x5c, 0x00, 0x00, 0xfd, 0x80, 0x01, // lane, lane load, load zero, i16x8.abs
	}
	truncated := module([]byte{0, 0x41, 0x01})
	truncated = truncated[:len(truncated)-2]
	for _, tc := range []struct {
		name string
		wasm []byte
		want string // "" to pass
	}{
		{"empty module", wasmbin.Header, ""},
		{"every immediate", module(immediates), ""},
		{"MaxBlocks nested blocks", module(blocks(MaxBlocks)), ""},
		{"one block more", module(blocks(MaxBlocks + 1)), "code section: function 0: more than 16384 blocks"},
		{"ifs and elses", module(ifElse), ""},
		{"an else more", module(append(ifElse, 0x41, 0x00, 0x04, 0x40, 0x05, 0x0b)), "more than 16384 blocks"},
		{"MaxBlockWork", module(blocks(MaxBlocks)), ""},
		{"past MaxBlockWork", module(blocks(MaxBlocks), blocks(1)), "functions 0 to 1 open too many blocks between them"},
		{"loops", module(nested(0, 0x03, MaxBlocks/LoopWeight)), ""},
		{"a loop more", module(nested(0, 0x03, MaxBlocks/LoopWeight+1)), "more than 16384 blocks (a loop counts 4"},
		{"MaxBlockVariables", module(nested(MaxBlockVariables/1024, 0x02, 1024)), ""},
		{"a variable more", module(nested(MaxBlockVariables/1024+1, 0x02, 1024)), "function 0 opens 1024 blocks with 1025 parameters and locals: their product passes 1048576"},
		{"a parameter more", moduleParams(1, nested(MaxBlockVariables/1024, 0x02, 1024)), "with 1025 parameters and locals"},
		{"MaxBlockWork with variables", module(slices.Repeat([][]byte{nested(1024, 0x02, 1024)}, MaxBlockWork/(1<<20+VariableWeight<<20))...), ""},
		{"past it", module(slices.Repeat([][]byte{nested(1024, 0x02, 1024)}, MaxBlockWork/(1<<20+VariableWeight<<20)+1)...), "functions 0 to 7 open too many blocks"},
		{"MaxFunctionSize", module(append([]byte{0}, make([]byte, MaxFunctionSize-2)...)), ""}, // unreachable
		{"a byte more", module(append([]byte{0}, make([]byte, MaxFunctionSize-1)...)), "function 0 takes 1048577 bytes, at most 1048576 allowed"},
		{"MaxLocals", module(append([]byte{2}, append(uleb(MaxLocals-1), 0x7f, 1, 0x7e)...)), ""},
		{"a local more", module(append([]byte{2}, append(uleb(MaxLocals), 0x7f, 1, 0x7e)...)), "50001 locals, at most 50000 allowed"},
		{"unknown type form", append(append([]byte(nil), wasmbin.Header...), 1, 2, 1, 0x5f), "type section: type 0: unknown type form 0x5f"},
		{"unknown opcode", module([]byte{0, 0x06}), "unknown opcode 0x6"},
		{"truncated", truncated, "truncated module"},
		{"not wasm", []byte("hello, world"), ErrNotWasm.Error()},
	} {
		err := Check(tc.wasm, maxPages)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if err := Check(module(make([]byte, MaxCodeSize)), maxPages); err == nil || !strings.Contains(err.Error(), "bytes of code, at most 16777216 allowed") {
		t.Errorf("%d bytes of code: %v", MaxCodeSize, err)
	}
	if !errors.Is(Check(nil, maxPages), ErrNotWasm) {
		t.Errorf("Check(nil) is not ErrNotWasm")
	}
}

// maxPages is the largest memory limit an engine takes.
const maxPages = 65535

// A module no instance of which could be made under the limits is refused,
// naming the bound and its limit: a memory's minimum above the memory
// limit, a table's above MaxTableElements, more than MaxTables tables.
func TestCheckInstanceLimits(t *testing.T) {
	section := func(id byte, payload ...byte) []byte {
		return append(append([]byte{id}, uleb(len(payload))...), payload...)
	}
	wasm := func(sections ...[]byte) []byte {
		return slices.Concat(append([][]byte{wasmbin.Header}, sections...)...)
	}
	name := func(s string) []byte { return append(uleb(len(s)), s...) }
	memory := func(limits ...byte) []byte { return section(wasmbin.MemorySection, append([]byte{1}, limits...)...) }
	table := func(min int) []byte { return append([]byte{0x70, 0}, uleb(min)...) }
	tables := func(n int) []byte {
		return section(wasmbin.TableSection, append(uleb(n), bytes.Repeat(table(0), n)...)...)
	}
	importMemory := section(wasmbin.ImportSection, slices.Concat([]byte{1}, name("env"), name("mem"), []byte{2, 0, 5})...)
	importTable := section(wasmbin.ImportSection, slices.Concat([]byte{1}, name("env"), name("t"), []byte{1}, table(0))...)
	for _, tc := range []struct {
		name string
		wasm []byte
		want string // "": accepted
	}{
		{"memory at the limit", wasm(memory(0, 4)), ""},
		{"memory with a maximum above the limit", wasm(memory(1, 4, 100)), ""},
		{"memory above the limit", wasm(memory(0, 5)), "memory section: memory 0: a minimum of 5 pages (320 KiB), above the memory limit of 4 pages (256 KiB)"},
		{"memory far above the limit", wasm(memory(0, 0x80, 0x20)), "a minimum of 4096 pages (256 MiB), above the memory limit of 4 pages"},
		{"imported memory above the limit", wasm(importMemory), "import section: memory env.mem: a minimum of 5 pages"},
		{"table at the cap", wasm(section(wasmbin.TableSection, append([]byte{1}, table(MaxTableElements)...)...)), ""},
		{"table above the cap", wasm(section(wasmbin.TableSection, append([]byte{1}, table(MaxTableElements+1)...)...)), "table section: table 0: a minimum of 1048577 elements, at most 1048576 allowed"},
		{"tables at the cap", wasm(tables(MaxTables)), ""},
		{"tables above the cap", wasm(tables(MaxTables + 1)), "9 tables, at most 8 allowed"},
		{"imported tables count", wasm(importTable, tables(MaxTables)), "9 tables, at most 8 allowed"},
		{"shared memory, left to the engine", wasm(memory(3, 5, 5)), ""},
	} {
		err := Check(tc.wasm, 4)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(module(blocks(3)))
	f.Add(module([]byte{0, 0xfd, 0x0c}))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		Check(wasm, 16) // must not panic or hang
	})
}
