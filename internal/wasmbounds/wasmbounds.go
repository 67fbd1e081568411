// Package wasmbounds refuses, before an engine compiles it, a module whose
// compilation would take too long or too much memory. Neither engine can
// stop a compile once started. Their costs grow with the size of the code
// and, per function, faster than linearly with the blocks it opens (loops
// most) and with its blocks times its variables: a 300 KB module of 100,000
// nested blocks held wazero for 76 to 107 s; one function of 4,096 blocks
// reading 4,096 locals took wazero 20 s and 973 MB. Check reads the type,
// function and code sections once, in time linear in the module's size,
// allocating only a count per type, and both runtime plugins call it first,
// so they refuse the same modules with the same message. A module using an
// opcode Check does not know (beyond WebAssembly 1.0 with sign extension,
// saturating truncation, bulk memory, reference types, multi-value and
// SIMD) is refused with an error naming the opcode.
// docs/adr/1016-bounded-compilation.md gives the figures.
//
// Check also refuses a module of which no instance could be made: a memory
// whose declared minimum is above the engine's memory limit, more or larger
// tables than an instance may have. An engine would find that out only when
// it instantiates the module, under an event's budget and with an error of
// its own.
package wasmbounds

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/wasmkeep/wasmkeep/internal/wasmbin"
)

// An instance may have MaxTables tables of at most MaxTableElements
// elements each (8 MiB each in wazero): table.grow stops there, and Check
// refuses a module whose tables need more. Both runtime plugins apply them,
// so a module runs on both or on neither.
const (
	MaxTables        = 8
	MaxTableElements = 1 << 20
)

// The bounds, which real modules pass with a margin: a standard Go guest
// (examples/counter, 2.5 MB) has 1.5 MB of code, a largest function of 29
// KB, at most 802 blocks and 18 variables in a function, a largest blocks
// times variables of 5,614 and a block work of 15 million. The Go compiler
// built for wasip1 (49 MB: 32.4 MB of code, a block work of 844 million)
// is refused. Compile costs at each bound are in
// docs/adr/1016-bounded-compilation.md.
const (
	// MaxCodeSize is the most bytes all function bodies may take together:
	// compile time and memory grow with it (16 MiB of additions: 47 s of
	// CPU and 769 MB on Wasmtime; the Go compiler's 32.4 MB: 20 s and 895
	// MB on wazero, 33 s and 1 GB on Wasmtime).
	MaxCodeSize = 16 << 20
	// MaxFunctionSize is the most bytes one function body may take: what
	// an engine holds while compiling a function grows with it (Wasmtime:
	// 343 MB for 1 MiB of additions).
	MaxFunctionSize = 1 << 20
	// MaxBlocks is the most blocks a function may open, a loop counting
	// LoopWeight (block, if and else count one each). Both engines compile
	// a function in time that grows with the square of its blocks: wazero
	// takes 0.9 s for 16,384 blocks, 5.9 s if each leaves by a br_if.
	MaxBlocks = 16384
	// LoopWeight is what a loop counts among a function's blocks: 16,384
	// loops took wazero 6.8 s and Wasmtime 8.1 s, 4,096 take 0.2 and 0.6 s.
	LoopWeight = 4
	// MaxBlockVariables bounds a function's blocks times its parameters
	// and locals: wazero merges each variable a function reads at each
	// block it reads it past, in time that grows faster than that product
	// (1,024 blocks reading 1,024 locals: 0.4 s).
	MaxBlockVariables = 1 << 20
	// VariableWeight is what a block times a variable counts in the block
	// work, against a block times a block.
	VariableWeight = 32
	// MaxBlockWork bounds the sum over a module's functions of their blocks
	// times (their blocks + VariableWeight times their variables), so that
	// many functions near the bounds cannot add up (at most about 6 s on
	// wazero).
	MaxBlockWork = 1 << 28
	// MaxLocals is the most locals a function may declare, as in Wasmtime
	// and V8.
	MaxLocals = 50000
)

// ErrNotWasm is what Check returns for bytes that are not a binary module.
var ErrNotWasm = errors.New("not a WebAssembly 1.0 binary module (bad magic number or version)")

// Check returns an error naming the bound a module exceeds and its limit
// (memoryLimitPages is the engine's limit on a linear memory, in 64 KiB
// pages), ErrNotWasm if wasm is not a binary module, or an error for a
// module it cannot read. It does not validate: what it accepts may still be
// refused by an engine.
func Check(wasm []byte, memoryLimitPages uint32) error {
	if !bytes.HasPrefix(wasm, wasmbin.Header) {
		return ErrNotWasm
	}
	r := wasmbin.Reader{Rest: wasm[len(wasmbin.Header):]}
	var params []uint32      // of each type
	var funcs wasmbin.Reader // the function section: each function's type
	var tables uint32        // imported
	for !r.Done() {
		id := r.Byte()
		payload := r.Bytes(r.U32())
		if r.Err != nil {
			break
		}
		var err error
		switch id {
		case wasmbin.TypeSection:
			params, err = paramCounts(payload)
		case wasmbin.ImportSection:
			tables, err = checkImports(payload, memoryLimitPages)
		case wasmbin.TableSection:
			err = checkTables(payload, tables)
		case wasmbin.MemorySection:
			err = checkMemories(payload, memoryLimitPages)
		case wasmbin.FunctionSection:
			funcs = wasmbin.Reader{Rest: payload}
			funcs.Count()
			err = funcs.Err
		case wasmbin.CodeSection:
			err = checkCode(payload, params, &funcs)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", wasmbin.SectionName(id), err)
		}
	}
	return r.Err
}

// checkImports checks the memories and tables a module imports, which an
// instance's limits cap as they cap its own, and returns how many tables it
// imports. It stops at an import it does not read, leaving it to the engine.
func checkImports(payload []byte, memoryLimitPages uint32) (tables uint32, err error) {
	r := wasmbin.Reader{Rest: payload}
	for n := r.Count(); n > 0 && r.Err == nil; n-- {
		name := string(r.Bytes(r.U32())) + "." + string(r.Bytes(r.U32()))
		switch r.Byte() {
		case 0: // function: its type
			r.U32()
		case 1: // table
			tables++
			if min, ok := tableType(&r); !ok {
				return tables, nil
			} else if err := checkTable("table "+name, min); err != nil {
				return 0, err
			}
		case 2: // memory
			if min, ok := limits(&r); !ok {
				return tables, nil
			} else if err := checkMemory("memory "+name, min, memoryLimitPages); err != nil {
				return 0, err
			}
		case 3: // global
			r.ValueType()
			r.Byte() // mutability
		default:
			return tables, nil
		}
	}
	return tables, r.Err
}

// checkTables checks the table section, imported tables besides.
func checkTables(payload []byte, imported uint32) error {
	r := wasmbin.Reader{Rest: payload}
	n := r.Count()
	if imported+n > MaxTables {
		return fmt.Errorf("%d tables, at most %d allowed", imported+n, MaxTables)
	}
	for i := range n {
		min, ok := tableType(&r)
		if !ok {
			return nil
		}
		if err := checkTable(fmt.Sprint("table ", imported+i), min); err != nil {
			return err
		}
	}
	return r.Err
}

func checkTable(what string, min uint32) error {
	if min > MaxTableElements {
		return fmt.Errorf("%s: a minimum of %d elements, at most %d allowed", what, min, MaxTableElements)
	}
	return nil
}

// checkMemories checks the memory section.
func checkMemories(payload []byte, limitPages uint32) error {
	r := wasmbin.Reader{Rest: payload}
	for i := range r.Count() {
		min, ok := limits(&r)
		if !ok {
			return nil
		}
		if err := checkMemory(fmt.Sprint("memory ", i), min, limitPages); err != nil {
			return err
		}
	}
	return r.Err
}

func checkMemory(what string, min, limitPages uint32) error {
	if min > limitPages {
		return fmt.Errorf("%s: a minimum of %d pages (%s), above the memory limit of %d pages (%s)", what, min, pageSize(min), limitPages, pageSize(limitPages))
	}
	return nil
}

// pageSize is the size of n 64 KiB pages, for a message.
func pageSize(n uint32) string {
	if n < 16 {
		return fmt.Sprintf("%d KiB", n*64)
	}
	return strconv.FormatFloat(float64(n)/16, 'f', -1, 64) + " MiB"
}

// tableType reads a table type and returns its minimum; ok is false for
// one it does not read (a table with an initial value, of the function
// references proposal).
func tableType(r *wasmbin.Reader) (min uint32, ok bool) {
	if len(r.Rest) > 0 && r.Rest[0] == 0x40 {
		return 0, false
	}
	r.ValueType() // the element type
	return limits(r)
}

// limits reads a memory's or table's limits and returns the minimum; ok is
// false for limits it does not read (shared, or 64-bit) and for bytes it
// cannot read.
func limits(r *wasmbin.Reader) (min uint32, ok bool) {
	flags := r.Byte()
	if flags&^1 != 0 {
		return 0, false
	}
	min = r.U32()
	if flags&1 != 0 {
		r.U32() // maximum
	}
	return min, r.Err == nil
}

// paramCounts reads the type section and returns each type's number of
// parameters.
func paramCounts(payload []byte) ([]uint32, error) {
	r := wasmbin.Reader{Rest: payload}
	counts := make([]uint32, r.Count())
	for i := range counts {
		if form := r.Byte(); form != 0x60 && r.Err == nil {
			return nil, fmt.Errorf("type %d: unknown type form %#x", i, form)
		}
		counts[i] = r.Count()
		for range counts[i] {
			r.ValueType()
		}
		for n := r.Count(); n > 0 && r.Err == nil; n-- {
			r.ValueType()
		}
	}
	return counts, r.Err
}

func checkCode(payload []byte, params []uint32, funcs *wasmbin.Reader) error {
	if len(payload) > MaxCodeSize {
		return fmt.Errorf("%d bytes of code, at most %d allowed", len(payload), MaxCodeSize)
	}
	r := wasmbin.Reader{Rest: payload}
	var work uint64
	for i, n := uint32(0), r.U32(); i < n && r.Err == nil; i++ {
		size := r.U32()
		if size > MaxFunctionSize {
			return fmt.Errorf("function %d takes %d bytes, at most %d allowed", i, size, MaxFunctionSize)
		}
		body := reader{wasmbin.Reader{Rest: r.Bytes(size)}}
		if r.Err != nil {
			break
		}
		var vars uint64 // parameters, then locals too
		if t := funcs.U32(); funcs.Err == nil && uint64(t) < uint64(len(params)) {
			vars = uint64(params[t])
		}
		blocks, err := body.function(&vars)
		if err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		if blocks*vars > MaxBlockVariables {
			return fmt.Errorf("function %d opens %d blocks with %d parameters and locals: "+
				"their product passes %d", i, blocks, vars, MaxBlockVariables)
		}
		if work += blocks*blocks + VariableWeight*blocks*vars; work > MaxBlockWork {
			return fmt.Errorf("functions 0 to %d open too many blocks between them: the sum of each "+
				"function's blocks times (blocks + %d times its parameters and locals) passes %d", i, VariableWeight, MaxBlockWork)
		}
	}
	return r.Err
}

// reader reads a function body: its locals and instructions.
type reader struct{ wasmbin.Reader }

// function reads a function body, its locals then its instructions, adds
// its locals to vars and returns how many blocks it opens, a loop counting
// LoopWeight.
func (r *reader) function(vars *uint64) (blocks uint64, err error) {
	locals := r.Locals()
	if locals > MaxLocals {
		return 0, fmt.Errorf("%d locals, at most %d allowed", locals, MaxLocals)
	}
	*vars += locals
	for !r.Done() {
		switch op := r.Byte(); op {
		case 0x02, 0x03, 0x04, 0x05: // block, loop, if, else
			if op != 0x05 {
				r.SkipLEB() // block type: an s33
			}
			if blocks++; op == 0x03 {
				blocks += LoopWeight - 1
			}
			if blocks > MaxBlocks {
				return 0, fmt.Errorf("more than %d blocks (a loop counts %d; block, if and else one each)", MaxBlocks, LoopWeight)
			}
		default:
			r.immediates(op)
		}
	}
	return blocks, r.Err
}

// immediates reads what follows an instruction other than block, loop, if
// and else.
func (r *reader) immediates(op byte) {
	switch {
	case op <= 0x01, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b, op >= 0x45 && op <= 0xc4, op == 0xd1:
		// no immediates
	case op == 0x0c, op == 0x0d, op == 0x10, op >= 0x20 && op <= 0x26, op == 0xd2:
		r.SkipLEB() // br, br_if, call, local.*, global.*, table.get/set, ref.func
	case op == 0x0e: // br_table
		for n := r.Count(); n > 0 && r.Err == nil; n-- {
			r.SkipLEB()
		}
		r.SkipLEB()
	case op == 0x11: // call_indirect: type, table
		r.SkipLEB()
		r.SkipLEB()
	case op == 0x1c: // select with types
		r.Bytes(r.Count())
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow
		r.Byte()
	case op == 0x41, op == 0x42, op == 0xd0: // i32.const, i64.const, ref.null
		r.SkipLEB()
	case op == 0x43: // f32.const
		r.Bytes(4)
	case op == 0x44: // f64.const
		r.Bytes(8)
	case op == 0xfc:
		r.miscImmediates()
	case op == 0xfd:
		r.simdImmediates()
	default:
		r.Failf("unknown opcode %#x", op)
	}
}

// miscImmediates reads what follows a 0xfc instruction: saturating
// truncation, bulk memory and table instructions.
func (r *reader) miscImmediates() {
	switch sub := r.U32(); {
	case sub <= 7: // trunc_sat
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		r.SkipLEB()
		r.SkipLEB()
	case sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.SkipLEB()
	default:
		r.Failf("unknown opcode 0xfc %d", sub)
	}
}

// simdImmediates reads what follows a 0xfd (SIMD) instruction.
func (r *reader) simdImmediates() {
	switch sub := r.U32(); {
	case sub <= 11, sub == 92, sub == 93: // loads and stores
		r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		r.Bytes(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		r.Byte()
	case sub >= 84 && sub <= 91: // lane loads and stores
		r.memarg()
		r.Byte()
	case sub <= 255:
		// no immediates
	default:
		r.Failf("unknown opcode 0xfd %d", sub)
	}
}

// memarg reads a load's or store's alignment and offset.
func (r *reader) memarg() {
	r.SkipLEB()
	r.SkipLEB()
}
