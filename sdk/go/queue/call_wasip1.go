//go:build wasip1

package queue

import "github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"

var call = wasmkeep.Call
