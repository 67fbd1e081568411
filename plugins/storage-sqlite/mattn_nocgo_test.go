//go:build !cgo

package sqlitestorage

import (
	"strings"
	"testing"
)

// In a build without cgo, choosing mattn says how to get a build with it.
func TestMattnWithoutCgo(t *testing.T) {
	cfg := NewConfig()
	cfg.Driver = "mattn"
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=1 go build") || !strings.Contains(err.Error(), "needs cgo") {
		t.Errorf("New with driver mattn and no cgo: %v", err)
	}
}
