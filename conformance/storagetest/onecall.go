package storagetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cputime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// oneCallTests: every limit holds inside one SQL function call too. SQLite's
// own instr, replace, trim, LIKE and GLOB cost O(n*m) in one call, where
// SQLite looks at neither its progress handler nor an interrupt: 95 s of
// CPU for instr(<16 MB>, <300 KB>) (issue 12). Such a call must end with
// its value or quota-exceeded within a few budgets, and compiling must
// spend the SQL CPU budget like running does.
var oneCallTests = []test{
	{"SQLCPUBudget", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: 200 * time.Millisecond})
		for _, c := range SlowCalls() {
			start := cputime.Thread()
			r, err := x.queryErr(c.SQL, c.Params...)
			cpu := cputime.Thread() - start
			if err != nil {
				wantKind(t, c.Name, err, abi.SQLQuotaExceeded)
			} else if v := r.one(); !Same(v, c.Value) {
				t.Errorf("%s: %s, want %s", c.Name, show(v), show(c.Value))
			}
			if cpu > 10*time.Second {
				t.Errorf("%s ran %v of CPU on a 200 ms SQL budget", c.Name, cpu)
			}
			x.endEvent()
			x.exec("SELECT 1")
		}
	}},
	{"Deadline", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: time.Hour})
		for _, c := range SlowCalls() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			start := time.Now()
			var w abi.RowsWriter
			err := x.db.Query(ctx, c.SQL, c.Params, &w)
			took := time.Since(start)
			cancel()
			if err != nil {
				wantKind(t, c.Name, err, abi.SQLQuotaExceeded)
			}
			if took > 10*time.Second {
				t.Errorf("%s ran %v past a 200 ms deadline", c.Name, took)
			}
			x.endEvent()
		}
	}},
	{"FailedParsesSpendBudget", func(t *testing.T, s suite) {
		x := s.open(t, storage.Options{SQLCPUPerEvent: 50 * time.Millisecond})
		var err error
		for n := 0; n < 1_000_000; n++ {
			if _, err = x.execErr(fmt.Sprintf("SELEC %d FROM nowhere", n)); storage.KindOf(err) != abi.SQLSyntax {
				break
			}
		}
		wantKind(t, "a loop of statements that fail to parse", err, abi.SQLQuotaExceeded)
		x.endEvent()
		x.exec("SELECT 1")
	}},
}

// SlowCall is one SQL function call that costs O(n*m) in SQLite's own
// function.
type SlowCall struct {
	Name   string
	SQL    string
	Params []abi.Value
	Value  abi.Value // SQLite's answer, for a call that ends within its budget
}

// SlowCalls are the calls the OneCall rules try: a driver's own tests may
// hold them to more (the default budget, which end how).
func SlowCalls() []SlowCall {
	// The longest text a value may have by default, less the byte
	// SQLite's replace() needs for its output's NUL.
	hay := T(strings.Repeat("a", 16<<20-1))
	needle := T(strings.Repeat("a", 300<<10) + "b")
	wild := strings.Repeat("a", 49_998) + "b" // SQLite's default limit on a pattern is 50,000 bytes
	return []SlowCall{
		{"instr", "SELECT instr(?, ?)", []abi.Value{hay, needle}, I(0)},
		{"replace", "SELECT length(replace(?, ?, 'x'))", []abi.Value{hay, needle}, I(16<<20 - 1)},
		{"trim", "SELECT length(trim(?, ?))", []abi.Value{hay, T(strings.Repeat("b", 300<<10) + "a")}, I(0)},
		{"like", "SELECT ? LIKE ?", []abi.Value{hay, T("%" + wild)}, I(0)},
		{"glob", "SELECT ? GLOB ?", []abi.Value{hay, T("*" + wild)}, I(0)},
	}
}
