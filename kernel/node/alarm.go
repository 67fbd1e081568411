package node

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// An actor's pending alarm lives in its own database (so it survives
// hibernation and restarts, and commits or rolls back with the event that
// set it), in a host table guests cannot see. failures counts the on-alarm
// attempts that failed in a row: while they are retried, at is the next
// attempt's time, which get-alarm returns.
const alarmTable = "_wasmkeep_alarm"

const (
	alarmRetryFirst = time.Second
	alarmRetryMax   = 5 * time.Minute
	// A due alarm refused admission (capacity, a full queue) is tried again
	// after a delay between half and all of a ceiling from 100 ms to 5 s.
	admitRetryFirst = 100 * time.Millisecond
	admitRetryMax   = 5 * time.Second
)

// ensureHostTables creates the host tables of a database that lacks them and
// records the actor's name, which the start-up scan reads back (a file name
// may hold only a hash of a long name).
func (a *actor) ensureHostTables(ctx context.Context) error {
	for _, sql := range []string{
		"CREATE TABLE IF NOT EXISTS " + metaTable + " (key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID",
		"CREATE TABLE IF NOT EXISTS " + alarmTable + " (id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL, failures INTEGER NOT NULL)",
	} {
		if _, err := a.db.HostExec(ctx, sql); err != nil {
			return err
		}
	}
	_, err := a.db.HostExec(ctx, "INSERT OR IGNORE INTO "+metaTable+" (key, value) VALUES ('name', ?)", text(a.addr.Name))
	return err
}

func text(s string) abi.Value { return abi.Value{Kind: abi.KindText, Bytes: []byte(s)} }

func integer(i int64) abi.Value { return abi.Value{Kind: abi.KindInteger, Int: i} }

// readAlarm returns the pending alarm (ms since the epoch) and its failure
// count; ok is false if there is none.
func readAlarm(ctx context.Context, db interface {
	HostQuery(context.Context, string, []abi.Value, *abi.RowsWriter) error
}) (at, failures int64, ok bool, err error) {
	var w abi.RowsWriter
	if err := db.HostQuery(ctx, "SELECT at, failures FROM "+alarmTable, nil, &w); err != nil {
		return 0, 0, false, err
	}
	r := abi.NewReader(w.Buf)
	if _, n := r.Columns(); n == 0 {
		return 0, 0, false, r.Err()
	}
	at, failures = r.Value().Int, r.Value().Int
	return at, failures, true, r.Err()
}

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
	if err := a.node.index.lower(a.key, a.class.name, a.addr.Name, int64(s[0])); err != nil {
		faultf("set-alarm: %v", err)
	}
	if _, err := a.db.HostExec(ctx, "INSERT INTO "+alarmTable+" (id, at, failures) VALUES (1, ?, 0) ON CONFLICT (id) DO UPDATE SET at = excluded.at, failures = 0", integer(int64(s[0]))); err != nil {
		faultf("set-alarm: %v", err)
	}
}

func alarmGet(ctx context.Context, st *eventState, _ runtime.Memory, s []uint64) {
	st.actorOnly("alarm_get")
	s[0] = uint64(1<<64 - 1) // -1: none
	if st.deleted {
		return
	}
	at, _, ok, err := readAlarm(ctx, st.actor.db)
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
	if _, err := st.actor.db.HostExec(ctx, "DELETE FROM "+alarmTable); err != nil {
		faultf("clear-alarm: %v", err)
	}
}

// runAlarm handles a due alarm: on-alarm runs if the alarm is still due (the
// schedule may be stale); success clears it, unless the handler set another;
// failure schedules a retry after 1 s, doubling up to 5 min, the count kept
// in the database.
func (a *actor) runAlarm(ctx context.Context) error {
	at, failures, ok, err := readAlarm(ctx, a.db)
	if err != nil {
		return &failure{"internal error", err}
	}
	if !ok || at > a.node.clock.Now().UnixMilli() {
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
		return &failure{"internal error", err}
	}
	if hookErr == nil {
		_, err = a.db.HostExec(context.Background(), "DELETE FROM "+alarmTable+" WHERE at = ? AND failures = ?", integer(at), integer(failures))
	} else {
		err = a.retryAlarm(at, failures)
	}
	a.state.alarmTouched = true
	if err != nil {
		return &failure{"internal error", err}
	}
	return hookErr
}

// retryAlarm counts a failed attempt and moves the alarm to the next one,
// unless the event set another alarm meanwhile.
func (a *actor) retryAlarm(at, failures int64) error {
	next := a.node.clock.Now().Add(retryDelay(failures + 1)).UnixMilli()
	_, err := a.db.HostExec(context.Background(), "UPDATE "+alarmTable+" SET at = ?, failures = failures + 1 WHERE at = ? AND failures = ?",
		integer(next), integer(at), integer(failures))
	return err
}

// alarmNotRun handles a due alarm whose event failed before on-alarm could
// run (the actor could not wake, or on-init failed): it is an attempt that
// failed, retried with the same backoff, so the alarm is neither lost nor
// retried in a tight loop.
func (a *actor) alarmNotRun() {
	if a.db == nil {
		a.node.alarms.set(a.key, a.class, a.addr.Name, a.node.clock.Now().Add(alarmRetryFirst))
		return
	}
	a.db.EndEvent(context.Background())
	if at, failures, ok, err := readAlarm(context.Background(), a.db); err == nil && ok && at <= a.node.clock.Now().UnixMilli() {
		if err := a.retryAlarm(at, failures); err != nil {
			a.node.log.Error("rescheduling alarm", "actor", a.key, "err", err)
		}
	}
	a.state.alarmTouched = true
}

// retryDelay is the wait before attempt n+1 after n failures in a row.
func retryDelay(failures int64) time.Duration {
	d := alarmRetryFirst
	for i := int64(1); i < failures && d < alarmRetryMax; i++ {
		d *= 2
	}
	return min(d, alarmRetryMax)
}

// schedule is the node's timer: the next due time of every actor with a
// pending alarm, fed by the events that touch alarms and, at start, by the
// data directory.
type schedule struct {
	mu    sync.Mutex
	items alarmHeap
	byKey map[string]*alarmItem
	kick  chan struct{}
}

type alarmItem struct {
	key   string
	class *class
	name  string
	due   time.Time
	tries int // admission refusals in a row
	index int
}

type alarmHeap []*alarmItem

func (h alarmHeap) Len() int           { return len(h) }
func (h alarmHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h alarmHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *alarmHeap) Push(x any)        { it := x.(*alarmItem); it.index = len(*h); *h = append(*h, it) }
func (h *alarmHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newSchedule() *schedule {
	return &schedule{byKey: map[string]*alarmItem{}, kick: make(chan struct{}, 1)}
}

// set schedules (or moves) an actor's alarm; clear forgets it.
func (s *schedule) set(key string, c *class, name string, due time.Time) {
	s.mu.Lock()
	if it := s.byKey[key]; it != nil {
		it.due, it.tries = due, 0
		heap.Fix(&s.items, it.index)
	} else {
		it := &alarmItem{key: key, class: c, name: name, due: due}
		s.byKey[key] = it
		heap.Push(&s.items, it)
	}
	s.mu.Unlock()
	s.poke()
}

func (s *schedule) clear(key string) {
	s.mu.Lock()
	if it := s.byKey[key]; it != nil {
		heap.Remove(&s.items, it.index)
		delete(s.byKey, key)
	}
	s.mu.Unlock()
}

func (s *schedule) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// next pops the first due alarm, or says how long until one is.
func (s *schedule) next(now time.Time) (*alarmItem, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 {
		return nil, time.Hour
	}
	if it := s.items[0]; !it.due.After(now) {
		heap.Pop(&s.items)
		delete(s.byKey, it.key)
		return it, 0
	}
	return nil, s.items[0].due.Sub(now)
}

// runAlarms delivers due alarms until the node stops.
func (n *Node) runAlarms() {
	t := n.clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := n.clock.Now()
		it, wait := n.alarms.next(now)
		if it != nil {
			n.deliverAlarm(it)
			continue
		}
		t.Reset(wait)
		// The timer counts wait from when it was armed: if the clock
		// moved meanwhile (a manual clock advanced, this thread
		// descheduled), it would fire late by as much, so compute again.
		if n.clock.Now().Sub(now) > time.Millisecond {
			continue
		}
		select {
		case <-t.C():
		case <-n.alarms.kick:
		case <-n.ctx.Done():
			return
		}
	}
}

// deliverAlarm queues an alarm event; one refused admission (or an owner
// not known now) is tried again with backoff and jitter. An actor another
// node holds leaves this node's timer: the holder's fires it.
func (n *Node) deliverAlarm(it *alarmItem) {
	// deliver's admission gives up after AdmissionWait on n.clock.
	ev := &event{ctx: n.ctx, alarm: true, reply: make(chan outcome, 1)}
	if err := n.deliver(n.ctx, it.class, it.name, ev); err != nil {
		var elsewhere *placement.Elsewhere
		if errors.As(err, &elsewhere) {
			n.log.Info("alarm left to the actor's holder", "actor", it.key, "node", elsewhere.Owner.Node)
			return
		}
		if errors.Is(err, errStopping) {
			return
		}
		n.metrics.AlarmRetried()
		ceiling := min(admitRetryFirst<<min(it.tries, 8), admitRetryMax)
		delay := ceiling/2 + rand.N(ceiling/2+1)
		n.alarms.mu.Lock()
		retry := n.alarms.byKey[it.key] == nil // an event may have rescheduled it meanwhile
		n.alarms.mu.Unlock()
		if retry {
			n.alarms.set(it.key, it.class, it.name, n.clock.Now().Add(delay))
			n.alarms.mu.Lock()
			n.alarms.byKey[it.key].tries = it.tries + 1
			n.alarms.mu.Unlock()
		}
		n.log.Warn("alarm delivery deferred", "actor", it.key, "err", err, "retry_in", delay)
	}
}

// scheduleFrom updates the node's timer and the alarm index from the
// actor's database, after an event that may have changed its alarm.
func (a *actor) scheduleFrom(ctx context.Context) {
	if a.db == nil { // deleted
		a.node.alarms.clear(a.key)
		if !a.node.hasDatabase(a.addr) { // removed for good: nothing left to sync
			a.node.index.settle(a.key, a.class.name, a.addr.Name, 0, false, func() error { return nil })
		}
		return
	}
	at, _, ok, err := readAlarm(ctx, a.db)
	switch {
	case err != nil:
		a.node.log.Error("reading alarm", "actor", a.key, "err", err)
		return
	case ok:
		a.node.alarms.set(a.key, a.class, a.addr.Name, time.UnixMilli(at))
	default:
		a.node.alarms.clear(a.key)
	}
	a.node.index.settle(a.key, a.class.name, a.addr.Name, at, ok, func() error {
		if s, ok := a.db.(storage.Syncer); ok {
			return s.Sync(ctx)
		}
		return nil
	})
}
