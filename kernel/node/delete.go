package node

import (
	"context"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// errDeleted refuses storage calls after delete-self-durable in the event.
var errDeleted = storage.Errorf(abi.SQLNotAllowed, "this actor was deleted in this event")

// deleteSelf serves delete-self (the actor is deleted when the event ends)
// and, with the durable flag, delete-self-durable (deleted inside the call:
// database closed, its files removed, the directory fsynced), book ADR 0028.
// Stack: flags, out ptr/cap.
func deleteSelf(_ context.Context, st *eventState, mem runtime.Memory, s []uint64) {
	flags := uint32(s[0])
	if flags&^abi.DeleteDurable != 0 {
		faultf("delete_self: unknown flags %#x", flags)
	}
	var err error
	switch {
	case st.actor.class.stateless:
		err = errStateless
	case flags&abi.DeleteDurable == 0:
		st.deleteAtEnd = true
	case st.actor.db != nil && st.actor.db.InTransaction():
		err = storage.Errorf(abi.SQLNotAllowed, "delete-self-durable inside a transaction: commit or roll back first")
	default:
		st.deleted = true                                         // storage stays refused, even if removing fails
		st.actor.Wait(func() { err = st.actor.removeDatabase() }) // an fsync, and with a bucket an upload
		st.actor.node.metrics.Deleted(metrics.DeleteSelfDurable, err)
		if err != nil {
			err = storage.Errorf(abi.SQLInternal, "removing the database: %v", err)
		}
	}
	if err != nil {
		s[0] = st.sqlError(mem, s[1], s[2], err)
		return
	}
	s[0] = st.result(mem, s[1], s[2], nil, false)
}

// removeDatabase closes the actor's database and has storage remove it,
// durably (storage.Driver.Remove). An absent database is not an error: a
// retry removes what is left. A held actor's delete is first recorded in
// the bucket (resetHeld).
func (a *actor) removeDatabase() error {
	if a.stream != nil {
		return a.resetHeld(context.Background())
	}
	if a.db != nil {
		err := a.db.Close()
		a.db = nil
		if err != nil {
			return err
		}
	}
	a.deleted.Store(true)
	return a.node.storage.Remove(context.Background(), a.node.stateDir, a.addr)
}
