package sqlitestorage

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// TestCapabilities logs what each driver declares and checks it has the
// required ones; conformance/storagetest probes every declared and
// undeclared one.
func TestCapabilities(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		caps := newDriver(t, name).(storage.CapabilityLister).Capabilities()
		t.Logf("%s: %s", name, strings.Join(caps, ", "))
		for _, c := range requiredCaps {
			if !slices.Contains(caps, c) {
				t.Errorf("driver %s runs without required capability %s", name, c)
			}
		}
	})
}

// TestHardening checks, per driver, what the connection's setup does below
// the authorizer (host statements skip it): defensive mode,
// trusted_schema=OFF, extension loading off.
func TestHardening(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx := context.Background()
		db, err := newDriver(t, name).Open(ctx, t.TempDir(), testAddr("h"), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var w abi.RowsWriter
		if err := db.HostQuery(ctx, "PRAGMA trusted_schema", nil, &w); err != nil {
			t.Fatal(err)
		}
		if v := firstValue(t, w.Buf); v.Kind != abi.KindInteger || v.Int != 0 {
			t.Errorf("trusted_schema is %+v, want 0", v)
		}
		if _, err := db.HostExec(ctx, "SELECT load_extension('libnothing')"); err == nil || !strings.Contains(err.Error(), "not authorized") {
			t.Errorf("load_extension as the host: %v, want not authorized", err)
		}
		// Defensive mode: writable_schema cannot open sqlite_schema to writes.
		if _, err := db.HostExec(ctx, "CREATE TABLE t(a)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.HostExec(ctx, "PRAGMA writable_schema = ON"); err != nil {
			t.Fatal(err)
		}
		_, err = db.HostExec(ctx, "UPDATE sqlite_schema SET sql = 'CREATE TABLE t(a, b)' WHERE name = 't'")
		if err == nil || !strings.Contains(err.Error(), "may not be modified") {
			t.Errorf("writing sqlite_schema with writable_schema on: %v, want refused (defensive mode)", err)
		}
	})
}

// TestRequiredCapabilities checks that a driver lacking a required
// capability is refused with how to get it.
func TestRequiredCapabilities(t *testing.T) {
	err := checkRequired("mattn", mattnRemedies{}, []string{storage.CapRTree})
	var lack *lackError
	if !errors.As(err, &lack) || !slices.Equal(lack.lack, []string{storage.CapFTS5}) || !strings.Contains(err.Error(), "-tags sqlite_fts5") {
		t.Errorf("checkRequired without fts5: %v", err)
	}
	if err := checkRequired("modernc", modernc{}, []string{storage.CapFTS5, storage.CapRTree}); err != nil {
		t.Error(err)
	}
}

// firstValue decodes the first value of an encoded result set.
func firstValue(t *testing.T, buf []byte) abi.Value {
	t.Helper()
	rd := abi.NewReader(buf)
	if _, rows := rd.Columns(); rows == 0 {
		t.Fatal("no rows")
	}
	v := rd.Value()
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

// mattnRemedies stands in for the mattn binding in builds without cgo.
type mattnRemedies struct{ binding }

func (mattnRemedies) remedy(c string) string { return mattnRemedy(c) }
