// Package storagetest holds the rules every storage/v2 plugin must pass: the
// book's storage interface, its sandbox and its quotas, the actor's files
// (Exists, Remove, Restore, Snapshot, Walk, names) and replication's capture
// (storage.Replicator). A plugin's test calls
// Run with a constructor for its driver:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Driver { return newDriver(t) })
//	}
//
// Every subtest opens real databases in t.TempDir() and locks its goroutine
// to its OS thread, as the kernel does during an event (the SQL CPU budget is
// measured on the thread's clock).
package storagetest

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// Run runs the whole suite; newDriver is called once per subtest.
func Run(t *testing.T, newDriver func(t *testing.T) storage.Driver) {
	s := suite{newDriver: newDriver}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Values", valueTests},
		{"Statements", statementTests},
		{"Errors", errorTests},
		{"Sandbox", sandboxTests},
		{"HostTables", hostTests},
		{"Transactions", txTests},
		{"Durable", durableTests},
		{"Quotas", quotaTests},
		{"OneCall", oneCallTests},
		{"Capabilities", capabilityTests},
		{"Files", fileTests},
		{"Replication", replicationTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, s) })
			}
		})
	}
}

type test struct {
	name string
	run  func(t *testing.T, s suite)
}

type suite struct {
	newDriver func(t *testing.T) storage.Driver
}

// h is one open database in a subtest.
type h struct {
	t    *testing.T
	drv  storage.Driver
	root string
	addr abi.Address
	opts storage.Options
	db   storage.DB
}

// open locks the test's goroutine to its thread and opens a fresh database.
func (s suite) open(t *testing.T, opts storage.Options) *h {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	x := &h{t: t, drv: s.newDriver(t), root: t.TempDir(), addr: abi.Address{Tenant: "default", Class: "test", Name: "actor"}, opts: opts}
	x.reopen()
	return x
}

// reopen closes the database (if open) and opens it again.
func (x *h) reopen() {
	x.t.Helper()
	if x.db != nil {
		if err := x.db.Close(); err != nil {
			x.t.Fatalf("Close: %v", err)
		}
	}
	db, err := x.drv.Open(context.Background(), x.root, x.addr, x.opts)
	if err != nil {
		x.t.Fatalf("Open %v: %v", x.addr, err)
	}
	x.db = db
	x.t.Cleanup(func() { db.Close() })
}

func (x *h) execErr(sql string, params ...abi.Value) (int64, error) {
	return x.db.Exec(context.Background(), sql, params, storage.ExecOptions{})
}

func (x *h) durableErr(sql string, params ...abi.Value) (int64, error) {
	return x.db.Exec(context.Background(), sql, params, storage.ExecOptions{Durable: true})
}

func (x *h) exec(sql string, params ...abi.Value) int64 {
	x.t.Helper()
	n, err := x.execErr(sql, params...)
	if err != nil {
		x.t.Fatalf("Exec(%q): %v", sql, err)
	}
	return n
}

func (x *h) queryErr(sql string, params ...abi.Value) (rows, error) {
	var w abi.RowsWriter
	if err := x.db.Query(context.Background(), sql, params, &w); err != nil {
		return rows{}, err
	}
	return decode(x.t, w.Buf), nil
}

func (x *h) query(sql string, params ...abi.Value) rows {
	x.t.Helper()
	r, err := x.queryErr(sql, params...)
	if err != nil {
		x.t.Fatalf("Query(%q): %v", sql, err)
	}
	return r
}

func (x *h) hostExec(sql string, params ...abi.Value) int64 {
	x.t.Helper()
	n, err := x.db.HostExec(context.Background(), sql, params...)
	if err != nil {
		x.t.Fatalf("HostExec(%q): %v", sql, err)
	}
	return n
}

func (x *h) hostQuery(sql string, params ...abi.Value) rows {
	x.t.Helper()
	var w abi.RowsWriter
	if err := x.db.HostQuery(context.Background(), sql, params, &w); err != nil {
		x.t.Fatalf("HostQuery(%q): %v", sql, err)
	}
	return decode(x.t, w.Buf)
}

func (x *h) endEvent() {
	x.t.Helper()
	if err := x.db.EndEvent(context.Background()); err != nil {
		x.t.Fatalf("EndEvent: %v", err)
	}
}

// count is SELECT count(*) of a guest table.
func (x *h) count(table string) int64 {
	x.t.Helper()
	return x.query("SELECT count(*) FROM " + table).one().Int
}

// rows is a decoded result set; values own their bytes.
type rows struct {
	cols []string
	vals [][]abi.Value
}

func (r rows) one() abi.Value {
	if len(r.vals) != 1 || len(r.vals[0]) != 1 {
		panic("storagetest: want one row of one column")
	}
	return r.vals[0][0]
}

func decode(t *testing.T, buf []byte) rows {
	t.Helper()
	rd := abi.NewReader(buf)
	var r rows
	for n := rd.Count(4); n > 0; n-- {
		r.cols = append(r.cols, rd.String())
	}
	for n := rd.U32(); n > 0 && rd.Err() == nil; n-- {
		row := make([]abi.Value, len(r.cols))
		for i := range row {
			row[i] = rd.Value()
			row[i].Bytes = append([]byte(nil), row[i].Bytes...)
		}
		r.vals = append(r.vals, row)
	}
	if err := rd.Done(); err != nil {
		t.Fatalf("decoding the result set: %v", err)
	}
	return r
}

// Value constructors.
func I(n int64) abi.Value   { return abi.Value{Kind: abi.KindInteger, Int: n} }
func R(f float64) abi.Value { return abi.Value{Kind: abi.KindReal, Float: f} }
func T(s string) abi.Value  { return abi.Value{Kind: abi.KindText, Bytes: []byte(s)} }
func B(b []byte) abi.Value  { return abi.Value{Kind: abi.KindBlob, Bytes: b} }
func N() abi.Value          { return abi.Value{Kind: abi.KindNull} }

// Same says whether a and b are the same SQL value, to the bit for reals.
func Same(a, b abi.Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case abi.KindInteger:
		return a.Int == b.Int
	case abi.KindReal:
		return math.Float64bits(a.Float) == math.Float64bits(b.Float)
	case abi.KindText, abi.KindBlob:
		return string(a.Bytes) == string(b.Bytes)
	}
	return true
}

// wantKind fails unless err is a storage error of one of the kinds.
func wantKind(t *testing.T, what string, err error, kinds ...abi.SQLErrorKind) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want a %v error", what, kinds)
		return
	}
	var se *storage.Error
	if !errors.As(err, &se) {
		t.Errorf("%s: error %v (%T) is not a *storage.Error", what, err, err)
		return
	}
	for _, k := range kinds {
		if se.Kind == k {
			return
		}
	}
	t.Errorf("%s: %v, want kind %v", what, err, kinds)
}

// infinite is a query that never ends on its own.
const infinite = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"

// deadline returns a context that ends after d.
func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
