//go:build wasip1

package workflow

import "github.com/wasmkeep/wasmkeep/sdk/go/wasmkeep"

func init() { host = wasiHost{} }

// wasiHost is the backend of a guest: the actor's own database and alarm.
type wasiHost struct{}

func (wasiHost) exec(durable bool, sql string, args ...any) {
	var err error
	if durable {
		_, err = wasmkeep.ExecDurable(sql, args...)
	} else {
		_, err = wasmkeep.Exec(sql, args...)
	}
	if err != nil {
		panic(dbError{err})
	}
}

func (wasiHost) query(sql string, args ...any) *wasmkeep.Rows {
	rows, err := wasmkeep.Query(sql, args...)
	if err != nil {
		panic(dbError{err})
	}
	return rows
}

func (wasiHost) setAlarm(at int64) { wasmkeep.SetAlarm(at) }

func (wasiHost) deleteSelf() {
	if err := wasmkeep.DeleteSelf(); err != nil {
		panic(dbError{err})
	}
}
