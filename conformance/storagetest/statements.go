package storagetest

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

var statementTests = []test{
	{"OnePerCall", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		for _, sql := range []string{
			"SELECT 1;",
			"SELECT 1 ;  ;; \n",
			"SELECT 1; -- a comment",
			"SELECT 1 /* a comment */ ; /* another */",
			"  -- leading comment\n SELECT 1",
			"SELECT ';' || \"a\" FROM (SELECT 1 AS \"a\")",
			"CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; SELECT 2; END;",
		} {
			if _, err := x.execErr(sql); err != nil {
				t.Errorf("Exec(%q): %v", sql, err)
			}
		}
		for _, sql := range []string{
			"SELECT 1; SELECT 2",
			"SELECT 1;; SELECT 2;",
			"INSERT INTO t VALUES(1); DROP TABLE t",
			"SELECT 1; -- c\n SELECT 2",
			"SELECT 1; garbage",
		} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLMultipleStatements)
		}
		if n := x.count("t"); n != 0 {
			t.Errorf("a refused text ran: t has %d rows", n)
		}
	}},
	{"NoStatement", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		for _, sql := range []string{"", "  ", ";", "-- nothing", "/* nothing */"} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLSyntax)
		}
		_, err := x.execErr("SELECT 1\x00; SELECT 2")
		wantKind(t, "text with a NUL byte", err, abi.SQLSyntax, abi.SQLMultipleStatements)
	}},
	{"Reopen", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		x.exec("INSERT INTO t VALUES(?)", T("kept"))
		x.endEvent()
		x.reopen()
		if got := x.query("SELECT a FROM t").one(); !Same(got, T("kept")) {
			t.Errorf("after reopening: %s, want text \"kept\"", show(got))
		}
	}},
}

var errorTests = []test{
	{"Syntax", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		for _, sql := range []string{"SELEC 1", "SELECT * FROM missing", "SELECT nosuchfunction(1)", "INSERT INTO", "CREATE TABLE (a)"} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLSyntax)
		}
	}},
	{"Constraint", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("PRAGMA foreign_keys = ON")
		x.exec("CREATE TABLE p(id INTEGER PRIMARY KEY)")
		x.exec("CREATE TABLE c(a INTEGER UNIQUE NOT NULL CHECK (a > 0), p INTEGER REFERENCES p(id)) STRICT")
		x.exec("INSERT INTO c(a) VALUES(1)")
		for _, sql := range []string{
			"INSERT INTO c(a) VALUES(1)",
			"INSERT INTO c(a) VALUES(NULL)",
			"INSERT INTO c(a) VALUES(-1)",
			"INSERT INTO c(a, p) VALUES(2, 42)",
			"INSERT INTO c(a) VALUES('not an integer')",
		} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLConstraint)
		}
	}},
	{"Bind", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		_, err := x.execErr("SELECT ?, ?", I(1))
		wantKind(t, "too few parameters", err, abi.SQLBind)
		_, err = x.execErr("SELECT ?", I(1), I(2))
		wantKind(t, "too many parameters", err, abi.SQLBind)
		_, err = x.execErr("SELECT 1", I(1))
		wantKind(t, "a parameter for none", err, abi.SQLBind)
		_, err = x.execErr("SELECT ?", abi.Value{Kind: 9})
		wantKind(t, "an unknown value kind", err, abi.SQLBind)
		if got := x.query("SELECT ?2, ?1", T("a"), T("b")); !Same(got.vals[0][0], T("b")) {
			t.Errorf("SELECT ?2, ?1: %v, want b first", got.vals)
		}
	}},
	{"Closed", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		if err := x.db.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := x.execErr("SELECT 1")
		wantKind(t, "Exec after Close", err, abi.SQLInternal)
		if err := x.db.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}},
}
