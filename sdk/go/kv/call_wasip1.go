//go:build wasip1

package kv

import "github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"

var defaultCall = wasmkeep.Call
