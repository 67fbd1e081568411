//go:build !wasip1

package queue

import (
	"errors"

	"github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"
)

// call exists for wasip1 actors only; the package's tests replace it.
var call = func(string, *wasmkeep.Request) (*wasmkeep.Response, error) {
	return nil, errors.New("calls to other actors exist only in a wasip1 actor")
}
