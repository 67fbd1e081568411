//go:build !wasip1

package kv

import (
	"errors"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// defaultCall outside wasip1: there is no host to call (the package's unit
// tests substitute a fake).
func defaultCall(string, *wasmkeep.Request) (*wasmkeep.Response, error) {
	return nil, errors.New("kv: calls need GOOS=wasip1")
}
