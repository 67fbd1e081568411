package storagetest

import (
	"slices"
	"testing"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// capabilityTests probe each optional capability (storage.Cap*): one the
// driver declares must work through the sandbox, and never skips; one it
// does not declare must be refused as SQL the build does not know (syntax),
// never as anything else, and the subtest then skips saying so.
var capabilityTests = func() []test {
	probes := []struct{ capability, setup, sql string }{
		{storage.CapFTS3, "", "CREATE VIRTUAL TABLE f3 USING fts3(a)"},
		{storage.CapFTS4, "", "CREATE VIRTUAL TABLE f4 USING fts4(a)"},
		{storage.CapFTS5, "", "CREATE VIRTUAL TABLE f5 USING fts5(a)"},
		{storage.CapRTree, "", "CREATE VIRTUAL TABLE r USING rtree(id, x0, x1)"},
		{storage.CapMath, "", "SELECT sqrt(4), pow(2, 10), ln(1)"},
		{storage.CapSoundex, "", "SELECT soundex('wasmkeep')"},
		{storage.CapOffset, "", "SELECT sqlite_offset(a) FROM t"},
		{storage.CapUpdateDeleteLimit, "", "DELETE FROM t WHERE a = 1 LIMIT 1"},
		{storage.CapStat4, "ANALYZE", "SELECT count(*) FROM sqlite_stat4"},
	}
	var tests []test
	for _, p := range probes {
		tests = append(tests, test{p.capability, func(t *testing.T, s suite) {
			x := s.open(t, storage.Options{})
			declared := slices.Contains(capabilities(x.drv), p.capability)
			for _, sql := range []string{"CREATE TABLE t(a)", "CREATE INDEX ta ON t(a)", "INSERT INTO t VALUES(1), (1), (2)", p.setup} {
				if sql != "" {
					x.exec(sql)
				}
			}
			_, err := x.execErr(p.sql)
			switch {
			case declared && err != nil:
				t.Fatalf("the driver declares %s, but %s: %v", p.capability, p.sql, err)
			case declared:
				return
			case err == nil:
				t.Fatalf("the driver does not declare %s, but %s ran", p.capability, p.sql)
			}
			wantKind(t, p.sql, err, abi.SQLSyntax)
			t.Skipf("the driver does not declare %s (checked: %s is refused as syntax)", p.capability, p.sql)
		}})
	}
	return append(tests, test{storage.CapLikeBlobs, func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{})
		matched := x.query("SELECT x'41' LIKE 'A'").one().Int == 1
		if declared := slices.Contains(capabilities(x.drv), storage.CapLikeBlobs); declared != matched {
			t.Fatalf("declares %s: %v, but x'41' LIKE 'A' matched: %v", storage.CapLikeBlobs, declared, matched)
		}
		if !matched {
			t.Skipf("the driver does not declare %s (checked: blobs do not match LIKE)", storage.CapLikeBlobs)
		}
	}})
}()

func capabilities(d storage.Driver) []string {
	if l, ok := d.(storage.CapabilityLister); ok {
		return l.Capabilities()
	}
	return nil
}
