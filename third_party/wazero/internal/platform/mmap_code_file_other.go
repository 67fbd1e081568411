//go:build !linux

package platform

import (
	"errors"
	"os"
)

// MmapCodeFile is unsupported here (on macOS, code mapped from a file must
// be signed): the caller reads the code into a segment of its own (WasmKeep
// patch).
func MmapCodeFile(*os.File, int64, int) ([]byte, error) {
	return nil, errors.ErrUnsupported
}
