package wazevo

import (
	"slices"
	"unsafe"

	"github.com/tetratelabs/wazero/internal/wasm"
)

// Fixed tables (wasm/fixed_table.go; WasmKeep patch): a compiled module
// makes each fixed table's references once, to functionInstances of its
// own with no module context, and its instances share them. A call
// through such a table passes the caller's module context (the frontend's
// call_indirect), the only instance its functions can belong to.

// fixedTables is a compiled module's shared copy of its fixed tables.
type fixedTables struct {
	// typeIDs are the type IDs of the store the references were made in:
	// an instance in another store (a compilation cache shared between
	// runtimes) gets a table of its own.
	typeIDs []wasm.FunctionTypeID
	tables  map[wasm.Index][]wasm.Reference
	// functions are the targets of the references, by local function index.
	functions []functionInstance
}

// FixedTableReferences implements wasm.FixedTableEngine.
func (m *moduleEngine) FixedTableReferences(tableIndex wasm.Index) []wasm.Reference {
	return m.parent.fixedTableReferences(tableIndex, m.module.TypeIDs)
}

func (c *compiledModule) fixedTableReferences(tableIndex wasm.Index, typeIDs []wasm.FunctionTypeID) []wasm.Reference {
	c.fixedMu.Lock()
	defer c.fixedMu.Unlock()
	f := &c.fixed
	if f.typeIDs == nil {
		f.typeIDs = typeIDs
	} else if !slices.Equal(f.typeIDs, typeIDs) {
		return nil
	}
	if refs, ok := f.tables[tableIndex]; ok {
		return refs
	}
	src := c.module
	refs := make([]wasm.Reference, src.TableSection[tableIndex-src.ImportTableCount].Min)
	for i := range src.ElementSection {
		elem := &src.ElementSection[i]
		if !elem.IsActive() || elem.TableIndex != tableIndex {
			continue
		}
		offset := wasm.ElementOffset(elem)
		for j := range elem.Init {
			var ref wasm.Reference // ref.null: a later segment clears what an earlier one set
			if fn, ok := wasm.LocalRefFunc(&elem.Init[j], src.ImportFunctionCount); ok {
				ref = uintptr(unsafe.Pointer(f.function(c, fn)))
			}
			refs[offset+uint32(j)] = ref
		}
	}
	if f.tables == nil {
		f.tables = map[wasm.Index][]wasm.Reference{}
	}
	f.tables[tableIndex] = refs
	return refs
}

// function returns the shared functionInstance of the local function fn.
func (f *fixedTables) function(c *compiledModule, fn wasm.Index) *functionInstance {
	src := c.module
	if f.functions == nil {
		f.functions = make([]functionInstance, len(src.FunctionSection))
	}
	local := fn - src.ImportFunctionCount
	lf := &f.functions[local]
	if lf.executable == nil {
		*lf = functionInstance{
			executable:    &c.executable[c.functionOffsets[local]],
			typeID:        f.typeIDs[src.FunctionSection[local]],
			indexInModule: fn,
		}
	}
	return lf
}
