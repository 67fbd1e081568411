//go:build wasip1

package actorcall

import "github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"

// Host is the host's actors.call.
var Host Func = wasmkeep.Call
