package wasm

import "github.com/tetratelabs/wazero/internal/leb128"

// Fixed tables (WasmKeep patch).
//
// A table is fixed when every instance of its module holds the same
// references in it from instantiation on, each to a function of that
// instance: it is the module's own (neither imported nor exported), no
// instruction but call_indirect (and return_call_indirect) uses it, and
// its active element segments put references to the module's own
// functions (or null) at constant offsets within its minimum size. Its
// references never leave the instance, so a call through it always enters
// the instance that made the call: an engine may then give every instance
// one shared copy of the table (FixedTableEngine) rather than fill a table
// of its own, element by element, at every instantiation. A Go guest's
// table has a slot per function: thousands of references, written for
// every new instance.

// FixedTableEngine is implemented by a ModuleEngine whose compiled code
// calls through a fixed table with the caller's own module context.
type FixedTableEngine interface {
	// FixedTableReferences returns the references of the fixed table
	// tableIndex, shared by every instance of the module and never
	// written, or nil if the instance must fill a table of its own.
	FixedTableReferences(tableIndex Index) []Reference
}

// IsTableFixed reports whether the table tableIndex is fixed (validation
// decides it).
func (m *Module) IsTableFixed(tableIndex Index) bool {
	return int(tableIndex) < len(m.fixedTables) && m.fixedTables[tableIndex]
}

// noteTableAccess records, during validation, that an instruction other
// than call_indirect reads or writes references of the table tableIndex.
func (m *Module) noteTableAccess(tableIndex Index, tableCount int) {
	if m.tablesAccessed == nil {
		m.tablesAccessed = make([]bool, tableCount)
	}
	m.tablesAccessed[tableIndex] = true
}

// decideFixedTables sets which of the module's tables are fixed, once its
// functions are validated. None is if an active segment could be out of
// bounds: instantiation then stops applying segments there (applyElements),
// and an instance's table would differ from the one made at compile time.
func (m *Module) decideFixedTables() {
	m.fixedTables = nil
	for i := range m.ElementSection {
		if elem := &m.ElementSection[i]; elem.IsActive() && !m.segmentInBounds(elem) {
			return
		}
	}
	for i := range m.TableSection {
		idx := m.ImportTableCount + Index(i)
		if !m.tableFixed(idx, &m.TableSection[i]) {
			continue
		}
		if m.fixedTables == nil {
			m.fixedTables = make([]bool, int(m.ImportTableCount)+len(m.TableSection))
		}
		m.fixedTables[idx] = true
	}
}

func (m *Module) tableFixed(idx Index, t *Table) bool {
	if t.Type != RefTypeFuncref || t.InitExpr != nil ||
		(int(idx) < len(m.tablesAccessed) && m.tablesAccessed[idx]) {
		return false
	}
	for i := range m.ExportSection {
		if e := &m.ExportSection[i]; e.Type == ExternTypeTable && e.Index == idx {
			return false
		}
	}
	for i := range m.ElementSection {
		elem := &m.ElementSection[i]
		if !elem.IsActive() || elem.TableIndex != idx {
			continue
		}
		for j := range elem.Init {
			if _, ok := LocalRefFunc(&elem.Init[j], m.ImportFunctionCount); !ok && !isRefNull(elem.Init[j].Data) {
				return false
			}
		}
	}
	return true
}

// segmentInBounds reports whether the active segment elem is within its
// table's minimum whatever the instance: the module's own table, at a
// constant offset.
func (m *Module) segmentInBounds(elem *ElementSegment) bool {
	if elem.TableIndex < m.ImportTableCount || int(elem.TableIndex-m.ImportTableCount) >= len(m.TableSection) {
		return false
	}
	offset, ok := constI32(elem.OffsetExpr.Data)
	return ok && uint64(offset)+uint64(len(elem.Init)) <= uint64(m.TableSection[elem.TableIndex-m.ImportTableCount].Min)
}

// ElementOffset returns the constant offset of an active element segment
// of a fixed table.
func ElementOffset(elem *ElementSegment) uint32 {
	offset, _ := constI32(elem.OffsetExpr.Data)
	return offset
}

// LocalRefFunc returns the function index of init if it is a ref.func of
// one of the module's own functions (not one of its importCount imports).
func LocalRefFunc(init *ConstantExpression, importCount Index) (Index, bool) {
	idx, ok := refFuncIndex(init.Data)
	return idx, ok && idx >= importCount
}

// refFuncIndex returns the function index of d if it is the constant
// expression ref.func (elementReference reads it without the evaluator).
func refFuncIndex(d []byte) (Index, bool) {
	if len(d) < 3 || d[0] != OpcodeRefFunc || d[len(d)-1] != OpcodeEnd {
		return 0, false
	}
	idx, n, err := leb128.LoadUint32(d[1:])
	return idx, err == nil && 1+int(n) == len(d)-1
}

func isRefNull(d []byte) bool {
	return len(d) == 3 && d[0] == OpcodeRefNull && d[2] == OpcodeEnd
}

func constI32(d []byte) (uint32, bool) {
	if len(d) < 3 || d[0] != OpcodeI32Const || d[len(d)-1] != OpcodeEnd {
		return 0, false
	}
	v, n, err := leb128.LoadInt32(d[1:])
	if err != nil || 1+int(n) != len(d)-1 {
		return 0, false
	}
	return uint32(v), true
}
