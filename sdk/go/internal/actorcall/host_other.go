//go:build !wasip1

package actorcall

import (
	"errors"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// Host outside wasip1: there is no host to call, so a client fails every
// call (the packages' unit tests substitute a fake).
func Host(string, *wasmkeep.Request) (*wasmkeep.Response, error) {
	return nil, errors.New("calls to actors need GOOS=wasip1")
}
