package deploys

import (
	"errors"
	"testing"

	"github.com/wasmkeep/wasmkeep/conformance/buckettest"
	"github.com/wasmkeep/wasmkeep/kernel/app"
)

// An app's tombstone is written once and kept; Load (a node's start), a
// deploy and a rollback of the app refuse it, another app is untouched.
// Fails with Load's check removed (a node would start on a deleted app).
func TestTombstoneRefuses(t *testing.T) {
	mem := buckettest.NewMemory(buckettest.Flaws{})
	shop, blog := app.Name{Tenant: "acme", App: "shop"}, app.Name{Tenant: "acme", App: "blog"}
	for i, want := range []bool{true, false} {
		if created, err := WriteTombstone(t.Context(), mem, shop, []byte("test\n")); err != nil || created != want {
			t.Fatalf("write %d: created %v, %v; want %v", i, created, err, want)
		}
	}
	if _, err := Load(t.Context(), mem, shop, t.TempDir()); !errors.Is(err, ErrAppDeleted) {
		t.Errorf("Load: %v, want ErrAppDeleted", err)
	}
	if _, err := Publish(t.Context(), mem, shop, Draft{Classes: map[string][]byte{"cart": []byte("\x00asm\x01\x00\x00\x00")}}); !errors.Is(err, ErrAppDeleted) {
		t.Errorf("Publish: %v, want ErrAppDeleted", err)
	}
	if _, err := Rollback(t.Context(), mem, shop, false); !errors.Is(err, ErrAppDeleted) {
		t.Errorf("Rollback: %v, want ErrAppDeleted", err)
	}
	if _, err := Load(t.Context(), mem, blog, t.TempDir()); !errors.Is(err, ErrNothingDeployed) {
		t.Errorf("Load of another app: %v, want ErrNothingDeployed", err)
	}
}
