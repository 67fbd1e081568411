package storagetest

import (
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

var sandboxTests = []test{
	{"Refused", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a)")
		for _, sql := range []string{
			"ATTACH DATABASE ':memory:' AS other",
			"ATTACH 'elsewhere.db' AS other",
			"DETACH DATABASE other",
			"VACUUM",
			"VACUUM INTO 'copy.db'",
			"SELECT load_extension('libevil')",
			"CREATE TEMP TABLE tt(a)",
			"CREATE TEMPORARY TABLE tt AS SELECT 1",
			"CREATE TABLE temp.tt(a)",
			"CREATE TEMP VIEW tv AS SELECT 1",
			"CREATE TEMP TRIGGER ttr AFTER INSERT ON t BEGIN SELECT 1; END",
			"CREATE VIRTUAL TABLE temp.tf USING fts5(a)",
			"CREATE VIRTUAL TABLE g USING geopoly(a)",
			"CREATE VIRTUAL TABLE n USING nosuchmodule(a)",
		} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLNotAllowed)
		}
		// Refused, or absent from the build.
		for _, sql := range []string{"SELECT * FROM sqlite_dbpage", "SELECT count(*) FROM dbstat", "SELECT fts3_tokenizer('simple')"} {
			_, err := x.queryErr(sql)
			wantKind(t, sql, err, abi.SQLNotAllowed, abi.SQLSyntax)
		}
	}},
	{"Pragmas", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE TABLE t(a INTEGER PRIMARY KEY, b REFERENCES t(a))")
		x.exec("CREATE INDEX tb ON t(b)")
		for _, sql := range []string{
			"PRAGMA journal_mode", "PRAGMA journal_mode = DELETE", "PRAGMA main.journal_mode = OFF",
			"PRAGMA synchronous = OFF", "PRAGMA wal_checkpoint", "PRAGMA wal_checkpoint(TRUNCATE)",
			"PRAGMA wal_autocheckpoint = 0", "PRAGMA max_page_count = 2147483647", "PRAGMA page_size = 512",
			"PRAGMA writable_schema = ON", "PRAGMA trusted_schema = ON", "PRAGMA cache_size = -2000000",
			"PRAGMA mmap_size = 1000000000", "PRAGMA locking_mode = EXCLUSIVE", "PRAGMA temp_store = MEMORY",
			"PRAGMA database_list", "PRAGMA secure_delete = ON", "PRAGMA query_only = ON",
			"PRAGMA auto_vacuum = FULL", "PRAGMA incremental_vacuum", "PRAGMA optimize",
			"PRAGMA schema_version = 1", "PRAGMA no_such_pragma",
		} {
			_, err := x.execErr(sql)
			wantKind(t, sql, err, abi.SQLNotAllowed)
		}
		for _, sql := range []string{
			"PRAGMA user_version", "PRAGMA table_info(t)", "PRAGMA table_xinfo(t)", "PRAGMA index_list(t)",
			"PRAGMA index_info(tb)", "PRAGMA foreign_key_list(t)", "PRAGMA foreign_key_check",
			"PRAGMA integrity_check", "PRAGMA quick_check", "PRAGMA page_count", "PRAGMA page_size",
			"PRAGMA foreign_keys", "PRAGMA foreign_keys = ON", "PRAGMA defer_foreign_keys = ON",
			"SELECT name FROM pragma_table_info('t')",
		} {
			if _, err := x.queryErr(sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
		x.exec("PRAGMA user_version = 7")
		if v := x.query("PRAGMA user_version").one(); v.Int != 7 {
			t.Errorf("user_version is %s after setting it to 7", show(v))
		}
	}},
	{"VirtualTables", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.exec("CREATE VIRTUAL TABLE docs USING fts5(body)")
		x.exec("INSERT INTO docs(body) VALUES('the quick brown fox'), ('lazy dogs')")
		if n := x.query("SELECT count(*) FROM docs WHERE docs MATCH 'fox'").one(); n.Int != 1 {
			t.Errorf("fts5 MATCH found %s rows, want 1", show(n))
		}
		x.exec("CREATE VIRTUAL TABLE boxes USING rtree(id, minx, maxx)")
		x.exec("INSERT INTO boxes VALUES(1, 0, 10), (2, 20, 30)")
		if n := x.query("SELECT count(*) FROM boxes WHERE minx <= 5 AND maxx >= 5").one(); n.Int != 1 {
			t.Errorf("rtree query found %s rows, want 1", show(n))
		}
		// fts3 and fts4 are allowed too, where the driver has them (the
		// Capabilities group).
	}},
	{"OrdinarySchemaWork", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		for _, sql := range []string{
			"CREATE TABLE t(a, b)",
			"CREATE TABLE log(a)",
			"CREATE INDEX ta ON t(a)",
			"CREATE VIEW tv AS SELECT a FROM t",
			"CREATE TRIGGER tt AFTER INSERT ON t BEGIN INSERT INTO log VALUES(new.a); END",
			"INSERT INTO t VALUES(1, 2)",
			"ALTER TABLE t ADD COLUMN c",
			"ALTER TABLE t RENAME TO t2",
			"ANALYZE",
			"REINDEX",
			"EXPLAIN SELECT * FROM t2",
			"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) SELECT sum(x) FROM c",
			"DROP VIEW tv",
			"DROP TABLE t2",
		} {
			if _, err := x.execErr(sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
		if n := x.count("log"); n != 1 {
			t.Errorf("the trigger logged %d rows, want 1", n)
		}
	}},
}

var hostTests = []test{
	{"InvisibleToGuests", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.hostExec("CREATE TABLE _wasmkeep_alarm(at INTEGER)")
		x.hostExec("INSERT INTO _wasmkeep_alarm VALUES(?)", I(42))
		x.exec("CREATE TABLE g(a)")
		for _, sql := range []string{
			"SELECT * FROM _wasmkeep_alarm",
			"SELECT count(*) FROM _wasmkeep_alarm",
			"SELECT at FROM _WASMKEEP_ALARM",
			"SELECT * FROM \"_wasmkeep_alarm\"",
			"SELECT * FROM main._wasmkeep_alarm",
			"WITH a AS (SELECT * FROM _wasmkeep_alarm) SELECT * FROM a",
			"SELECT (SELECT max(at) FROM _wasmkeep_alarm)",
			"INSERT INTO g SELECT at FROM _wasmkeep_alarm",
			"INSERT INTO _wasmkeep_alarm VALUES(1)",
			"UPDATE _wasmkeep_alarm SET at = 0",
			"DELETE FROM _wasmkeep_alarm",
			"DROP TABLE _wasmkeep_alarm",
			"CREATE INDEX gi ON _wasmkeep_alarm(at)",
			"CREATE TABLE _wasmkeep_mine(a)",
			"CREATE TABLE _WasmKeep_Mine(a)",
			"CREATE VIEW _wasmkeep_view AS SELECT 1",
			"CREATE VIRTUAL TABLE _wasmkeep_text USING fts5(a)",
			"ALTER TABLE _wasmkeep_alarm ADD COLUMN b",
			"ALTER TABLE _wasmkeep_alarm RENAME TO mine",
			"ALTER TABLE g RENAME TO _wasmkeep_g",
			"ALTER TABLE g ADD COLUMN h REFERENCES _wasmkeep_alarm(at)",
			"CREATE TABLE probe(a REFERENCES _wasmkeep_alarm(at))",
			"CREATE TRIGGER gt AFTER INSERT ON _wasmkeep_alarm BEGIN SELECT 1; END",
			"PRAGMA table_info(_wasmkeep_alarm)",
			"PRAGMA index_list('_wasmkeep_alarm')",
			"SELECT * FROM pragma_table_info('_wasmkeep_alarm')",
		} {
			_, err := x.queryErr(sql)
			wantKind(t, sql, err, abi.SQLNotAllowed)
		}
		// Objects that only refer to a host table may be created, but using
		// them is refused.
		for _, c := range []struct{ create, use string }{
			{"CREATE VIEW peek AS SELECT * FROM _wasmkeep_alarm", "SELECT * FROM peek"},
			{"CREATE TRIGGER clear AFTER INSERT ON g BEGIN DELETE FROM _wasmkeep_alarm; END", "INSERT INTO g VALUES(1)"},
		} {
			if _, err := x.execErr(c.create); err != nil {
				wantKind(t, c.create, err, abi.SQLNotAllowed)
				continue
			}
			_, err := x.queryErr(c.use)
			wantKind(t, c.use+" (after "+c.create+")", err, abi.SQLNotAllowed)
		}
		if got := x.hostQuery("SELECT at FROM _wasmkeep_alarm").one(); got.Int != 42 {
			t.Errorf("host reads %s from its table, want 42", show(got))
		}
	}},
	{"HostJoinsTransaction", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		x.hostExec("CREATE TABLE _wasmkeep_alarm(at INTEGER)")
		x.exec("CREATE TABLE g(a)")
		x.exec("BEGIN")
		x.exec("INSERT INTO g VALUES(1)")
		x.hostExec("INSERT INTO _wasmkeep_alarm VALUES(1)")
		x.exec("ROLLBACK")
		if n := x.hostQuery("SELECT count(*) FROM _wasmkeep_alarm").one().Int; n != 0 || x.count("g") != 0 {
			t.Errorf("after ROLLBACK: %d host rows, %d guest rows; want none", n, x.count("g"))
		}
		x.exec("BEGIN")
		x.exec("INSERT INTO g VALUES(1)")
		x.hostExec("INSERT INTO _wasmkeep_alarm VALUES(1)")
		x.exec("COMMIT")
		x.endEvent()
		x.reopen()
		if n := x.hostQuery("SELECT count(*) FROM _wasmkeep_alarm").one().Int; n != 1 || x.count("g") != 1 {
			t.Errorf("after COMMIT and reopening: %d host rows, %d guest rows; want one each", n, x.count("g"))
		}
	}},
	{"HostBypassesSandbox", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		if mode := x.hostQuery("PRAGMA journal_mode").one(); !Same(mode, T("wal")) {
			t.Errorf("journal_mode is %s, want wal", show(mode))
		}
		x.hostExec("CREATE TABLE _wasmkeep_kv(k TEXT PRIMARY KEY, v)")
		x.hostExec("INSERT INTO _wasmkeep_kv VALUES(?, ?)", T("a"), B([]byte{1, 2}))
		if got := x.hostQuery("SELECT v FROM _wasmkeep_kv WHERE k = ?", T("a")).one(); !Same(got, B([]byte{1, 2})) {
			t.Errorf("host read %s, want blob 0102", show(got))
		}
	}},
}
