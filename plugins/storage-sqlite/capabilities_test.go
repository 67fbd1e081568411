package sqlitestorage

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// TestCapabilities checks each driver's declared capabilities against what
// its guests can do: a declared one works through the sandbox, an
// undeclared one fails as an SQL error (syntax), never as something else.
// This is the check conformance/storagetest would make with declared
// capabilities (see README.md).
func TestCapabilities(t *testing.T) {
	forEachDriver(t, func(t *testing.T, name string) {
		drv := newDriver(t, name)
		caps := drv.(*driver).Capabilities()
		t.Logf("%s: %s", name, strings.Join(caps, ", "))
		for _, c := range requiredCaps {
			if !slices.Contains(caps, c) {
				t.Errorf("driver %s runs without required capability %s", name, c)
			}
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx := context.Background()
		db, err := drv.Open(ctx, filepath.Join(t.TempDir(), "caps.db"), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		exec := func(sql string) error {
			_, err := db.Exec(ctx, sql, nil, storage.ExecOptions{})
			return err
		}
		for _, sql := range []string{"CREATE TABLE t(a)", "CREATE INDEX ta ON t(a)", "INSERT INTO t VALUES(1), (1), (2)"} {
			if err := exec(sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		for _, c := range []struct{ cap, sql string }{
			{capFTS3, "CREATE VIRTUAL TABLE f3 USING fts3(a)"},
			{capFTS4, "CREATE VIRTUAL TABLE f4 USING fts4(a)"},
			{capFTS5, "CREATE VIRTUAL TABLE f5 USING fts5(a)"},
			{capRTree, "CREATE VIRTUAL TABLE r USING rtree(id, x0, x1)"},
			{capMath, "SELECT sqrt(4), pow(2, 10), ln(1)"},
			{capSoundex, "SELECT soundex('wasmkeep')"},
			{capOffset, "SELECT sqlite_offset(a) FROM t"},
			{capUpdateDeleteLimit, "DELETE FROM t WHERE a = 1 LIMIT 1"},
			{capStat4, "SELECT count(*) FROM sqlite_stat4"},
		} {
			if c.cap == capStat4 {
				if err := exec("ANALYZE"); err != nil {
					t.Fatalf("ANALYZE: %v", err)
				}
			}
			err := exec(c.sql)
			switch has := slices.Contains(caps, c.cap); {
			case has && err != nil:
				t.Errorf("declares %s, but %s: %v", c.cap, c.sql, err)
			case !has && err == nil:
				t.Errorf("does not declare %s, but %s ran", c.cap, c.sql)
			case !has && storage.KindOf(err) != abi.SQLSyntax:
				t.Errorf("does not declare %s; %s: %v, want a syntax error", c.cap, c.sql, err)
			}
		}
		var w abi.RowsWriter
		if err := db.Query(ctx, "SELECT x'41' LIKE 'A'", nil, &w); err != nil {
			t.Fatal(err)
		}
		matched := firstValue(t, w.Buf).Int == 1
		if has := slices.Contains(caps, capLikeBlobs); has != matched {
			t.Errorf("declares like_blobs: %v; x'41' LIKE 'A' matched: %v", has, matched)
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
		db, err := newDriver(t, name).Open(ctx, filepath.Join(t.TempDir(), "h.db"), storage.Options{})
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
	err := checkRequired("mattn", mattnRemedies{}, []string{capRTree})
	var lack *lackError
	if !errors.As(err, &lack) || !slices.Equal(lack.lack, []string{capFTS5}) || !strings.Contains(err.Error(), "-tags sqlite_fts5") {
		t.Errorf("checkRequired without fts5: %v", err)
	}
	if err := checkRequired("modernc", modernc{}, []string{capFTS5, capRTree}); err != nil {
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
