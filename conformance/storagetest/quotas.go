package storagetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

var quotaTests = []test{
	{"DatabaseSize", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{MaxDatabaseBytes: 1 << 20})
		x.exec("CREATE TABLE t(b)")
		blob := B(bytes.Repeat([]byte{7}, 32<<10))
		var err error
		for i := 0; i < 64 && err == nil; i++ { // 2 MiB, twice the limit
			_, err = x.execErr("INSERT INTO t VALUES(?)", blob)
			x.endEvent()
		}
		wantKind(t, "growing the database past 1 MiB", err, abi.SQLQuotaExceeded)
		if n := x.count("t"); n < 16 || n >= 64 {
			t.Errorf("%d blobs of 32 KiB fitted in 1 MiB", n)
		}
	}},
	{"ValueSize", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{MaxValueBytes: 64 << 10})
		x.exec("CREATE TABLE t(v)")
		if n := x.query("SELECT length(?)", B(make([]byte, 64<<10))).one(); n.Int != 64<<10 {
			t.Errorf("a value at the limit: length %s", show(n))
		}
		_, err := x.execErr("INSERT INTO t VALUES(?)", B(make([]byte, 64<<10+1)))
		wantKind(t, "a blob parameter past the limit", err, abi.SQLQuotaExceeded)
		_, err = x.execErr("INSERT INTO t VALUES(?)", T(string(make([]byte, 64<<10+1))))
		wantKind(t, "a text parameter past the limit", err, abi.SQLQuotaExceeded)
		for _, sql := range []string{
			"SELECT zeroblob(100000)",
			"SELECT length(randomblob(100000))",
			"INSERT INTO t VALUES(zeroblob(100000))",
			"SELECT printf('%.*c', 100000, 'x')",
		} {
			_, err := x.queryErr(sql)
			wantKind(t, sql, err, abi.SQLQuotaExceeded)
		}
	}},
	{"ResultSize", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{MaxResultBytes: 64 << 10})
		const rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ?) SELECT x, 'padding' FROM c"
		if r := x.query(rows, I(100)); len(r.vals) != 100 {
			t.Errorf("a small result: %d rows, want 100", len(r.vals))
		}
		_, err := x.queryErr(rows, I(100000))
		wantKind(t, "a result past 64 KiB", err, abi.SQLQuotaExceeded)
		_, err = x.queryErr("SELECT ?", B(make([]byte, 65<<10)))
		wantKind(t, "one value past the result limit", err, abi.SQLQuotaExceeded)
	}},
	{"SQLCPUBudget", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: 100 * time.Millisecond})
		_, err := x.queryErr(infinite)
		wantKind(t, "a statement past the SQL CPU budget", err, abi.SQLQuotaExceeded)
		_, err = x.queryErr("SELECT 1")
		wantKind(t, "a statement once the budget is spent", err, abi.SQLQuotaExceeded)
		_, err = x.execErr(infinite)
		wantKind(t, "Exec once the budget is spent", err, abi.SQLQuotaExceeded)
		x.endEvent()
		if v := x.query("SELECT 1").one(); v.Int != 1 {
			t.Errorf("the next event's SELECT 1: %s", show(v))
		}
	}},
	{"HostStatementsOutsideBudget", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: 100 * time.Millisecond})
		_, err := x.queryErr(infinite)
		wantKind(t, "a statement past the SQL CPU budget", err, abi.SQLQuotaExceeded)
		x.hostExec("CREATE TABLE _wasmkeep_alarm(at)")
		x.hostExec("INSERT INTO _wasmkeep_alarm VALUES(1)")
	}},
	{"Deadline", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		var w abi.RowsWriter
		err := x.db.Query(deadline(t, 100*time.Millisecond), infinite, nil, &w)
		wantKind(t, "a statement past the event's deadline", err, abi.SQLQuotaExceeded)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = x.db.Exec(ctx, "SELECT 1", nil, storage.ExecOptions{})
		wantKind(t, "a statement after the deadline", err, abi.SQLQuotaExceeded)
		x.endEvent()
		x.exec("SELECT 1")
	}},
	{"WritePerEvent", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{WritePerEvent: 256 << 10})
		x.exec("CREATE TABLE t(b)")
		blob := B(bytes.Repeat([]byte{1}, 16<<10))
		var err error
		for i := 0; i < 64 && err == nil; i++ { // 1 MiB, four times the budget
			_, err = x.execErr("INSERT INTO t VALUES(?)", blob)
		}
		wantKind(t, "writing past the event's budget", err, abi.SQLQuotaExceeded)
		n := x.count("t") // reads still run
		if n < 8 || n >= 64 {
			t.Errorf("%d writes of 16 KiB fitted in a 256 KiB budget", n)
		}
		x.exec("BEGIN") // and so do transaction control statements
		x.exec("COMMIT")
		x.endEvent()
		x.exec("INSERT INTO t VALUES(?)", blob)
	}},
}
