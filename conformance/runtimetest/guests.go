package runtimetest

import (
	"encoding/binary"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// The suite's hand-written guests. Each exports "memory" (one page unless
// said otherwise).

const (
	hostModule = "wasmkeep"
	wasiModule = "wasi_snapshot_preview1"
)

// addGuest exports add32(i32, i32) -> i32 and add64(i64, i64) -> i64.
func addGuest() []byte {
	m := &wasmModule{}
	m.function("add32", sig("ii>i"), nil, localGet(0), localGet(1), op(opI32Add))
	m.function("add64", sig("II>I"), nil, localGet(0), localGet(1), op(opI64Add))
	m.defineMemory(1, -1, true)
	return m.bytes()
}

// cellGuest keeps one i32 at address 0, initially 42: set(v), get() -> v;
// and counts its calls to set in a global: sets() -> n.
func cellGuest() []byte {
	m := &wasmModule{}
	m.global(-1) // unused: puts sets at index 1
	sets := m.global(0)
	m.function("set", sig("i>"), nil, i32Const(0), localGet(0), i32Store(0),
		globalGet(sets), i32Const(1), op(opI32Add), globalSet(sets))
	m.function("sets", sig(">i"), nil, globalGet(sets))
	m.function("get", sig(">i"), nil, i32Const(0), i32Load(0))
	m.defineMemory(1, -1, true)
	m.dataAt(0, binary.LittleEndian.AppendUint32(nil, 42))
	return m.bytes()
}

// memoryGuest has a memory of min pages and max (none if < 0) and exports
// grow(pages) -> previous pages or -1, and size() -> pages.
func memoryGuest(min uint32, max int64) []byte {
	m := &wasmModule{}
	m.function("grow", sig("i>i"), nil, localGet(0), memoryGrow())
	m.function("size", sig(">i"), nil, memorySize())
	m.defineMemory(min, max, true)
	return m.bytes()
}

// failGuest exports functions that fail in the guest: unreachable, an
// out-of-bounds load, unbounded recursion, a loop without end and a
// recursion that takes ages without a loop.
func failGuest() []byte {
	m := &wasmModule{}
	m.function("unreachable", sig(""), nil, op(opUnreachable))
	m.function("out_of_bounds", sig(""), nil, i32Const(-4), i32Load(0), op(opDrop))
	self := m.nFuncs
	m.function("recurse", sig(""), nil, callFunc(self))
	m.function("spin", sig(""), nil, loop(br(0)))
	self = m.nFuncs
	m.function("fanout", sig("i>"), nil, fanout(self))
	m.defineMemory(1, -1, true)
	return m.bytes()
}

// hostGuest imports the host functions of hostFunctions and forwards each as
// an export of the same name; run(ptr, len) -> n calls upper(ptr, len, 1024,
// 64).
func hostGuest(fns []runtime.HostFunction) []byte {
	m := &wasmModule{}
	idx := make([]uint32, len(fns))
	for i, f := range fns {
		idx[i] = m.importFunc(hostModule, f.Name, f.Signature)
	}
	for i, f := range fns {
		m.forward(f.Name, idx[i], f.Signature)
		if f.Name == "upper" {
			m.function("run", sig("ii>i"), nil, localGet(0), localGet(1), i32Const(1024), i32Const(64), callFunc(idx[i]))
		}
	}
	m.defineMemory(1, -1, true)
	return m.bytes()
}

// wasiFunctions are the WASI functions wasiGuest forwards.
var wasiFunctions = []struct{ name, sig string }{
	{"fd_write", "iiii>i"},
	{"fd_read", "iiii>i"},
	{"clock_time_get", "iIi>i"},
	{"poll_oneoff", "iiii>i"},
	{"random_get", "ii>i"},
	{"fd_prestat_get", "ii>i"},
	{"path_open", "iiiiiIIii>i"},
	{"sock_accept", "iii>i"},
	{"sock_recv", "iiiiii>i"},
	{"args_sizes_get", "ii>i"},
	{"environ_sizes_get", "ii>i"},
	{"proc_exit", "i>"},
}

// wasiGuest forwards wasiFunctions as exports of the same name, so the suite
// calls WASI directly, with arguments it lays out in memory.
func wasiGuest() []byte {
	m := &wasmModule{}
	idx := make([]uint32, len(wasiFunctions))
	for i, f := range wasiFunctions {
		idx[i] = m.importFunc(wasiModule, f.name, sig(f.sig))
	}
	for i, f := range wasiFunctions {
		m.forward(f.name, idx[i], sig(f.sig))
	}
	m.defineMemory(1, -1, true)
	return m.bytes()
}

// loopGuest imports nop(i32) -> i32 and peek(ptr, len) -> i32 and exports
// add(i32, i32) -> i32, nops(n), calling nop n times, peeks(n), calling
// peek(0, 16) n times, and fanout(n): the benchmarks' guest.
func loopGuest() []byte {
	m := &wasmModule{}
	nop := m.importFunc(hostModule, "nop", sig("i>i"))
	peek := m.importFunc(hostModule, "peek", sig("ii>i"))
	m.function("add", sig("ii>i"), nil, localGet(0), localGet(1), op(opI32Add))
	m.function("nops", sig("i>"), nil, countdown(0, localGet(0), callFunc(nop), op(opDrop)))
	m.function("peeks", sig("i>"), nil, countdown(0, i32Const(0), i32Const(16), callFunc(peek), op(opDrop)))
	self := m.nFuncs
	m.function("fanout", sig("i>"), nil, fanout(self))
	m.defineMemory(1, -1, true)
	return m.bytes()
}

// fanout is the body of function self(n), which calls self(n-1) twice
// unless n is 0: 2^(n+1)-1 calls and no loop.
func fanout(self uint32) []byte {
	return block(localGet(0), op(opI32Eqz), brIf(0),
		localGet(0), i32Const(1), op(opI32Sub), callFunc(self),
		localGet(0), i32Const(1), op(opI32Sub), callFunc(self))
}

// countdown runs body while local n is not zero, decrementing it each time.
func countdown(n uint32, body ...[]byte) []byte {
	return block(loop(
		localGet(n), op(opI32Eqz), brIf(1),
		cat(body...),
		localGet(n), i32Const(1), op(opI32Sub), localSet(n),
		br(0),
	))
}
