package storagetest

import (
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

var txTests = []test{
	{"AcrossCalls", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		if x.db.InTransaction() {
			t.Error("InTransaction before BEGIN")
		}
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(1)")
		x.exec("INSERT INTO t VALUES(2)")
		if !x.db.InTransaction() {
			t.Error("not InTransaction after BEGIN")
		}
		x.exec("COMMIT")
		if x.db.InTransaction() {
			t.Error("InTransaction after COMMIT")
		}
		x.endEvent()
		if n := x.count("t"); n != 2 {
			t.Errorf("%d rows after COMMIT, want 2", n)
		}
	}},
	{"EndEventRollsBack", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("BEGIN IMMEDIATE")
		x.exec("INSERT INTO t VALUES(1)")
		x.endEvent()
		if n := x.count("t"); n != 0 {
			t.Errorf("%d rows after an event ended inside its transaction, want 0", n)
		}
		x.exec("BEGIN") // the next event starts clean
		x.exec("INSERT INTO t VALUES(2)")
		x.exec("END")
		if n := x.count("t"); n != 1 {
			t.Errorf("%d rows after the next event's transaction, want 1", n)
		}
	}},
	{"Savepoints", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("SAVEPOINT outer_sp")
		x.exec("INSERT INTO t VALUES(1)")
		x.exec("SAVEPOINT inner_sp")
		x.exec("INSERT INTO t VALUES(2)")
		x.exec("ROLLBACK TO inner_sp")
		x.exec("RELEASE outer_sp")
		x.endEvent()
		if n := x.count("t"); n != 1 {
			t.Errorf("%d rows, want 1 (the second was rolled back to its savepoint)", n)
		}
		x.exec("SAVEPOINT open_sp")
		x.exec("INSERT INTO t VALUES(3)")
		x.endEvent()
		if n := x.count("t"); n != 1 {
			t.Errorf("%d rows after an event ended inside a savepoint, want 1", n)
		}
	}},
	{"CloseRollsBack", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(1)")
		x.reopen()
		if n := x.count("t"); n != 0 {
			t.Errorf("%d rows after closing inside a transaction, want 0", n)
		}
	}},
	{"FailureKeepsTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a UNIQUE)")
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(1)")
		_, err := x.execErr("INSERT INTO t VALUES(1)")
		wantKind(t, "duplicate", err, abi.SQLConstraint)
		x.exec("INSERT INTO t VALUES(2)") // only the statement was undone
		x.exec("COMMIT")
		if n := x.count("t"); n != 2 {
			t.Errorf("%d rows, want 2", n)
		}
	}},
	{"FailureEndsTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a UNIQUE)")
		x.exec("INSERT INTO t VALUES(1)")
		x.endEvent()
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(2)")
		_, err := x.execErr("INSERT OR ROLLBACK INTO t VALUES(1)")
		wantKind(t, "INSERT OR ROLLBACK of a duplicate", err, abi.SQLConstraint)
		wantEnded(t, x)
	}},
	{"StoppedStatementEndsTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: 100 * time.Millisecond})
		x.exec("CREATE TABLE t(a)")
		x.exec("INSERT INTO t VALUES(1)")
		x.endEvent()
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(2)")
		_, err := x.queryErr(infinite)
		wantKind(t, "a statement past the SQL CPU budget", err, abi.SQLQuotaExceeded)
		wantEnded(t, x)
	}},
	{"DeadlineEndsTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("INSERT INTO t VALUES(1)")
		x.endEvent()
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(2)")
		var w abi.RowsWriter
		err := x.db.Query(deadline(t, 100*time.Millisecond), infinite, nil, &w)
		wantKind(t, "a statement past the event's deadline", err, abi.SQLQuotaExceeded)
		wantEnded(t, x)
	}},
}

// wantEnded checks the rule for an event whose transaction a failure rolled
// back (one row committed before it, one lost with it): every statement is
// refused with not-allowed but ROLLBACK, until the event ends.
func wantEnded(t *testing.T, x *h) {
	t.Helper()
	_, err := x.execErr("INSERT INTO t VALUES(3)")
	wantKind(t, "INSERT after the transaction was rolled back", err, abi.SQLNotAllowed)
	_, err = x.queryErr("SELECT count(*) FROM t")
	wantKind(t, "SELECT after the transaction was rolled back", err, abi.SQLNotAllowed)
	_, err = x.durableErr("COMMIT")
	wantKind(t, "COMMIT after the transaction was rolled back", err, abi.SQLNotAllowed)
	for range 2 {
		if _, err := x.execErr("ROLLBACK"); err != nil {
			t.Errorf("ROLLBACK after the transaction was rolled back: %v", err)
		}
	}
	x.endEvent()
	if n := x.count("t"); n != 1 {
		t.Errorf("%d rows in the next event, want 1 (the transaction's row is gone)", n)
	}
	x.exec("BEGIN")
	x.exec("INSERT INTO t VALUES(4)")
	x.exec("COMMIT")
}

var durableTests = []test{
	{"InsideTransactionOnlyCommit", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("BEGIN")
		for _, sql := range []string{"INSERT INTO t VALUES(1)", "SAVEPOINT sp", "RELEASE sp", "ROLLBACK", "SELECT 1", "BEGIN"} {
			_, err := x.durableErr(sql)
			wantKind(t, "durable "+sql+" inside a transaction", err, abi.SQLNotAllowed)
		}
		if n := x.count("t"); n != 0 {
			t.Errorf("a refused durable INSERT ran: %d rows", n)
		}
		x.exec("INSERT INTO t VALUES(2)")
		if _, err := x.durableErr("COMMIT"); err != nil {
			t.Fatalf("durable COMMIT: %v", err)
		}
		x.exec("BEGIN")
		x.exec("INSERT INTO t VALUES(3)")
		if _, err := x.durableErr("END TRANSACTION"); err != nil {
			t.Fatalf("durable END: %v", err)
		}
		x.endEvent()
		x.reopen()
		if n := x.count("t"); n != 2 {
			t.Errorf("%d rows after reopening, want 2", n)
		}
	}},
	{"OutsideTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		for _, sql := range []string{"BEGIN", "BEGIN IMMEDIATE", "SAVEPOINT sp", "RELEASE sp", "ROLLBACK", "ROLLBACK TO sp"} {
			_, err := x.durableErr(sql)
			wantKind(t, "durable "+sql+" outside a transaction", err, abi.SQLNotAllowed)
		}
		if n, err := x.durableErr("INSERT INTO t VALUES(?), (?)", I(1), I(2)); err != nil || n != 2 {
			t.Fatalf("durable INSERT: %d, %v; want 2 rows changed", n, err)
		}
		x.endEvent()
		x.reopen()
		if n := x.count("t"); n != 2 {
			t.Errorf("%d rows after reopening, want 2", n)
		}
	}},
}
