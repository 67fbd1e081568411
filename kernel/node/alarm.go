package node

import (
	"context"
	"errors"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// The alarm row, the schedule and the index are kernel/node/alarm's; what
// follows is where they meet an actor: its host tables, the host functions
// of the alarms interface, an alarm's event, and delivery.

// ensureHostTables creates the host tables of a database that lacks them
// (the actor's name is recorded by set-alarm: nameKey).
func (a *actor) ensureHostTables(ctx context.Context) error {
	return hostTables(ctx, a.db)
}

// hostSchema creates the host's tables. The storage driver is given it to
// prepare new databases with (storage.Preparation, from a template where
// the driver keeps one); hostTables runs it after every open all the same.
var hostSchema = []string{
	"CREATE TABLE IF NOT EXISTS " + metaTable + " (key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID",
	alarm.CreateTable,
}

// hostTables creates the host's tables in an actor's database.
func hostTables(ctx context.Context, db storage.DB) error {
	for _, sql := range hostSchema {
		if _, err := db.HostExec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// nameKey names the metadata row that records the actor's name, which a
// long name's file name does not hold (it is a hash): the alarm index's
// rebuild reads it beside the alarm. It is written with the alarm, before
// it in the same event, so that every alarm committed has it, and a new
// actor that sets none commits nothing for it.
const nameKey = "name"

// Host functions of the alarms interface. After delete-self-durable in the
// event, get returns none and set and clear do nothing; the stateless
// component has no alarms.
func alarmSet(ctx context.Context, st *eventState, _ runtime.Memory, s []uint64) {
	st.actorOnly("alarm_set")
	if st.deleted {
		return
	}
	st.alarmTouched = true
	a := st.actor
	if at := int64(s[0]); a.stream != nil && (at < 0 || at > alarmindex.MaxAt) {
		// Its entry could not be listed: every event would give the actor up.
		faultf("set-alarm: %d ms is outside 0 to %d, what the bucket's alarm index holds", at, int64(alarmindex.MaxAt))
	}
	if err := a.node.index.Lower(a.key, a.class.name, a.addr.Name, int64(s[0])); err != nil {
		faultf("set-alarm: %v", err)
	}
	if _, err := a.db.HostExec(ctx, "INSERT OR IGNORE INTO "+metaTable+" (key, value) VALUES ('"+nameKey+"', ?)", text(a.addr.Name)); err != nil {
		faultf("set-alarm: %v", err)
	}
	if err := alarm.Set(ctx, a.db, int64(s[0])); err != nil {
		faultf("set-alarm: %v", err)
	}
}

func alarmGet(ctx context.Context, st *eventState, _ runtime.Memory, s []uint64) {
	st.actorOnly("alarm_get")
	s[0] = uint64(1<<64 - 1) // -1: none
	if st.deleted {
		return
	}
	at, _, ok, err := alarm.Read(ctx, st.actor.db)
	if err != nil {
		faultf("get-alarm: %v", err)
	}
	if ok {
		s[0] = uint64(at)
	}
}

func alarmClear(ctx context.Context, st *eventState, _ runtime.Memory, _ []uint64) {
	st.actorOnly("alarm_clear")
	if st.deleted {
		return
	}
	st.alarmTouched = true
	if err := alarm.Clear(ctx, st.actor.db); err != nil {
		faultf("clear-alarm: %v", err)
	}
}

// runAlarm handles a due alarm (alarmDue): on-alarm runs if the alarm is
// due still, on-init having run since and possibly moved or cleared it;
// success clears it, unless the handler set or cleared the alarm itself;
// failure schedules a retry (alarm.Retry), the count kept in the database
// and read here, before the handler runs.
func (a *actor) runAlarm(ctx context.Context) error {
	at, failures, ok, err := alarm.Read(ctx, a.db)
	if err != nil {
		return &failure{public: "internal error", cause: err}
	}
	if !a.alarmIsDue(at, ok) {
		a.state.alarmTouched = true // a stale schedule: follow the database
		return nil
	}
	hookErr := a.callHook(ctx, abi.ExportOnAlarm, 0)
	if a.state.deleted || a.state.deleteAtEnd {
		return hookErr
	}
	// What the handler left open is rolled back before the host decides,
	// so a failed attempt is counted on the alarm as committed.
	if err := a.db.EndEvent(context.Background()); err != nil {
		return &failure{public: "internal error", cause: err}
	}
	// A handler that succeeded after setting or clearing the alarm decided
	// what comes next, even one that set the same time again (a queue whose
	// backlog shares one due time). A failure is retried with the backoff
	// unless the handler cleared the alarm or set it past the retry, so
	// that a handler failing at once cannot fire itself in a loop, even
	// one that sets its alarm for now before it fails.
	switch {
	case hookErr != nil:
		err = alarm.Retry(context.Background(), a.db, at, failures, a.node.clock.Now())
	case !a.state.alarmTouched:
		err = alarm.Done(context.Background(), a.db, at, failures)
	}
	a.state.alarmTouched = true
	if err != nil {
		return &failure{public: "internal error", cause: err}
	}
	return hookErr
}

// alarmIsDue reports whether a committed alarm (at, pending: alarm.Read)
// is due now.
func (a *actor) alarmIsDue(at int64, pending bool) bool {
	return pending && at <= a.node.clock.Now().UnixMilli()
}

// alarmNotRun handles a due alarm whose event failed before on-alarm could
// run (the actor could not wake, or on-init failed): it is an attempt that
// failed, retried with the same backoff, so the alarm is neither lost nor
// retried in a tight loop. Without a database, the time delivered (at) is
// delivered again.
func (a *actor) alarmNotRun(at int64) {
	if a.db == nil {
		a.node.alarms.SetAt(a.key, a.class.name, a.addr.Name, time.UnixMilli(at), a.node.clock.Now().Add(alarm.RetryDelay(1)))
		return
	}
	a.db.EndEvent(context.Background())
	if at, failures, ok, err := alarm.Read(context.Background(), a.db); err == nil && ok && at <= a.node.clock.Now().UnixMilli() {
		if err := alarm.Retry(context.Background(), a.db, at, failures, a.node.clock.Now()); err != nil {
			a.node.log.Error("rescheduling alarm", "actor", a.key, "err", err)
		}
	}
	a.state.alarmTouched = true
}

// deliverAlarm queues an alarm event; one refused admission (or an owner
// not known now) is tried again with backoff and jitter. An actor another
// node holds leaves this node's timer: the holder's fires it. One nobody
// holds, on a node that takes no actor, is handed off (alarmToTaker). (An alarm
// only this node's data holds, single-node data whose first upload failed,
// comes back through the sweep: its entry, left by the node that found
// nothing, is anyone's once three margins overdue, and this node's
// delivery restores nothing over its own data: ADR 1048.)
func (n *Node) deliverAlarm(it *alarm.Item) {
	c := n.class(it.Class)
	if c == nil { // a version dropped it as it came due
		return
	}
	// deliver's admission gives up after AdmissionWait on n.clock.
	ev := &event{ctx: n.ctx, alarm: true, at: it.At.UnixMilli(), reply: make(chan outcome, 1)}
	key := n.actorKey(c, it.Name)
	n.alarmEvents.add(key) // until answered (actor.answer): the sweep leaves it out
	if err := n.deliver(n.ctx, c, it.Name, ev); err != nil {
		n.alarmEvents.done(key)
		var elsewhere *placement.Elsewhere
		if errors.As(err, &elsewhere) && elsewhere.Owner.Taker {
			// Nobody holds it and this node takes none: the peer that
			// takes it is asked to, so the alarm fires there now; with a
			// take under way for it (a hand-off) or maxTakes, later.
			if !n.startTake(key, func() { n.alarmToTaker(it) }) && n.ctx.Err() == nil {
				n.metrics.AlarmRetried()
				n.log.Info("alarm hand-off deferred: a take for the actor is under way, or as many takes as run at a time", "actor", it.Key, "retry_in", n.alarms.Defer(it, n.clock.Now()))
			}
			return
		}
		// A move's target that holds nothing yet (ADR 1070) has no timer
		// entry: the alarm stays here, deferred, until a node holds the
		// actor. An actor another node holds: its timer fires the alarm.
		if errors.As(err, &elsewhere) && elsewhere.Owner.Successor {
			n.metrics.AlarmRetried()
			n.log.Info("alarm deferred: its actor moves to a node that does not hold it yet", "actor", it.Key, "node", elsewhere.Owner.Node, "retry_in", n.alarms.Defer(it, n.clock.Now()))
			return
		}
		if errors.As(err, &elsewhere) {
			n.log.Info("alarm left to the actor's holder", "actor", it.Key, "node", elsewhere.Owner.Node)
			return
		}
		if errors.Is(err, errStopping) {
			return
		}
		n.metrics.AlarmRetried()
		delay := n.alarms.Defer(it, n.clock.Now())
		n.log.Warn("alarm delivery deferred", "actor", it.Key, "err", err, "retry_in", delay)
	}
}

// alarmToTaker hands off a due alarm whose actor nobody holds, on a node
// that takes none (book ADR 0014's alarm hand-off, as a take call: ADR
// 1052): the peer that takes the actor takes it and fires the alarm. A
// take that fails is tried again with the backoff of a refused delivery,
// one refused for good is not (handOffAlarm); with no peer that answers
// takes, the alarm is left to the peer the placement chose (its sweep).
func (n *Node) alarmToTaker(it *alarm.Item) {
	peer, found := n.takeTarget(it.Class, it.Name)
	if !found {
		n.log.Info("alarm left to the peer that takes the actor: no peer answers takes", "actor", it.Key)
		return
	}
	if n.handOffAlarm(peer, it.Class, it.Name, it.Key, it.At) == takeFailed {
		if n.ctx.Err() == nil {
			n.metrics.AlarmRetried()
			n.log.Warn("alarm hand-off deferred", "actor", it.Key, "retry_in", n.alarms.Defer(it, n.clock.Now()))
		}
	}
}

// scheduleFrom updates the node's timer and the alarm index from the
// actor's database, after an event that may have changed its alarm, or
// as a hold starts (holdStart), when the alarm may be new to this node:
// restored from the bucket or committed by the node that held the actor.
func (a *actor) scheduleFrom(ctx context.Context, holdStart bool) {
	if a.db == nil { // deleted
		a.node.alarms.Clear(a.key)
		if !a.node.hasDatabase(a.addr) { // removed for good: nothing left to sync
			a.node.index.Settle(a.key, a.class.name, a.addr.Name, 0, false, func() error { return nil })
		}
		return
	}
	at, _, ok, err := alarm.Read(ctx, a.db)
	switch {
	case err != nil:
		a.node.log.Error("reading alarm", "actor", a.key, "err", err)
		return
	case ok:
		a.node.alarms.Set(a.key, a.class.name, a.addr.Name, time.UnixMilli(at))
		// Indexed as an event indexes an alarm it sets, so Settle does not
		// take it for one committed here without its entry.
		if holdStart {
			if err := a.node.index.Lower(a.key, a.class.name, a.addr.Name, at); err != nil {
				a.node.log.Error("alarm index", "actor", a.key, "err", err)
			}
		}
	default:
		a.node.alarms.Clear(a.key)
	}
	a.node.index.Settle(a.key, a.class.name, a.addr.Name, at, ok, func() error {
		if s, ok := a.db.(storage.Syncer); ok {
			return s.Sync(ctx)
		}
		return nil
	})
}

// loadAlarms opens the alarm index (rebuilding it if it must) and feeds the
// timer from it, at start: the entries of the served classes (the others
// stay in the index for when they are).
func (n *Node) loadAlarms(ctx context.Context) error {
	ix, err := alarm.OpenIndex(ctx, alarm.IndexOptions{
		Root: n.stateDir, Tenant: n.opts.App.Tenant, Log: n.log, Clock: n.clock,
		Storage: n.storage, StorageOptions: n.opts.Storage,
		Name: func(ctx context.Context, db storage.DB) (string, bool, error) {
			return metaValue(ctx, db, nameKey)
		},
		Rebuilt: n.metrics.IndexRebuilt, Unreadable: n.metrics.IndexUnreadable,
	}, func(items map[string]alarm.Entry) {
		for key, e := range items {
			if n.class(e.Class) != nil {
				n.alarms.Set(key, e.Class, e.Name, time.UnixMilli(e.At))
			}
		}
	})
	n.index = ix
	return err
}

// ArmAlarm has the node's timer deliver class/name's alarm for the time
// at, an index entry's (what the sweep is to arm): the actor is taken
// (restored from the bucket), and a time its committed alarm no longer
// holds is stale, its entries removed.
func (n *Node) ArmAlarm(class, name string, at time.Time) {
	n.alarms.Set(n.opts.App.Tenant+"/"+class+"/"+name, class, name, at)
}
