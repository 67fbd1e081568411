package wazeroruntime

import (
	"errors"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/wasmkeep/kernel/runtime"
)

// imports lists a module's imports in declaration order. wazero reports only
// function and memory imports, but the contract needs tables and globals
// too, so they come from prepare; funcs are wazero's ImportedFunctions, in
// the same order, for the signatures.
func imports(raw []rawImport, funcs []api.FunctionDefinition) ([]runtime.Import, error) {
	out := make([]runtime.Import, 0, len(raw))
	for _, r := range raw {
		imp := runtime.Import{Module: r.module, Name: r.name}
		if r.kind == kindFunc {
			if len(funcs) == 0 {
				return nil, errors.New("more function imports than wazero reports")
			}
			imp.IsFunc = true
			imp.Params = valueTypes(funcs[0].ParamTypes())
			imp.Results = valueTypes(funcs[0].ResultTypes())
			funcs = funcs[1:]
		}
		out = append(out, imp)
	}
	if len(funcs) != 0 {
		return nil, errors.New("fewer function imports than wazero reports")
	}
	return out, nil
}

func valueTypes(ts []api.ValueType) []runtime.ValueType {
	out := make([]runtime.ValueType, len(ts))
	for i, t := range ts {
		out[i] = runtime.ValueType(t)
	}
	return out
}
