package node

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deletes"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/replication"
	"github.com/wasmkeep/wasmkeep/kernel/cputime"
	"github.com/wasmkeep/wasmkeep/kernel/node/fair"
	"github.com/wasmkeep/wasmkeep/kernel/node/guestlog"
	"github.com/wasmkeep/wasmkeep/kernel/node/mailbox"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/runtime"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// event is one thing for an actor to handle: an HTTP request or call, an
// alarm, or a WebSocket open, message or close.
type event struct {
	ctx     context.Context // the sender's: if done before the event starts, it is not run
	payload []byte          // the encoded abi.Request
	reply   chan outcome    // buffered: the actor never waits for the sender
	chain   []string        // actors waiting in the call chain that sent it (calls only)
	alarm   bool            // the pending alarm is due (no payload, no reply read)
	take    bool            // a take call: acquire and restore, no guest code (take.go)
	at      int64           // an alarm's: the time it was delivered for, ms (alarm.Item.At)
	ws      *wsEvent        // a WebSocket event; payload is what its hook finds pending
	placed  bool            // the front door asked the placement for it already (place)
	class   *class          // the class it took where it arrived (deliver): it runs on it (upToDate)
	del     *deleteJob      // an operator's delete (ends.go): runs no guest code
}

// fromOutside reports whether ev is a client's, which an access rule
// admitted: a request or socket open the front door placed, or a socket's
// message or close. Calls and alarms are not.
func (ev *event) fromOutside() bool { return ev.placed || ev.ws != nil }

// outcome is how an event ended.
type outcome struct {
	resp    abi.Response
	err     error // the event failed (see failure)
	skipped bool  // the sender left before it started
}

// failure is an event that failed, with what the client may be told.
type failure struct {
	public string // the response body: never host details
	cause  error  // for the log
	retry  bool   // the client may retry: 503 with Retry-After, not 500
	status int    // the HTTP status, when neither 500 nor 503
}

func (f *failure) Error() string { return f.public + ": " + f.cause.Error() }
func (f *failure) Unwrap() error { return f.cause }

var (
	errCPUBudget = errors.New("the event used up its CPU budget")
	errHostCPU   = errors.New("the event used up its CPU cap, host calls included")
	errWallClock = errors.New("the event ran past its wall-clock limit")
)

// actor is one resident actor: its mailbox, its database and (while it has
// one) its instance. Only the holder of its turn touches db and inst: its
// goroutine, or a front-door request that runs on its own (runInline).
type actor struct {
	node  *Node
	class *class
	addr  abi.Address
	key   string // tenant/class/name, or "stateless": names it in the log
	prev  *actor // the previous incarnation, possibly still closing

	queue      *mailbox.Mailbox[*event]
	turn       sync.Mutex // held while an event runs and while it hibernates: one at a time
	evict      chan struct{}
	claim      chan bool // the admission that evicts it, under the node's lock: gets its slot (true) or false if it stays
	stopCh     chan struct{}
	done       chan struct{} // closed once db and instance are closed
	idleTimer  clock.Timer   // the idle timeout (armIdle), armed again as each event ends (nil for the stateless component)
	busy       atomic.Bool
	lastActive atomic.Int64
	ran        uint64      // events run, counted as each ends: read and written in the turn
	lruAt      int64       // lastActive when placed in the node's lruHeap, under the node's lock (lru.go)
	lruIndex   int         // its place there
	deleted    atomic.Bool // deleted and not created again: no longer "exists" for access rules
	// handingOver: being handed over (taking.go); it takes no new event
	// but a socket's close, so its queue runs out.
	handingOver atomic.Bool

	db       storage.DB
	newDB    bool                 // db was created by its open (storage.Created) and no init is recorded in it yet
	hold     ownership.Hold       // with a bucket: the actor's hold while its database is open
	stream   *replication.Stream  // with a bucket: the hold's replication, nil on a node alone
	erasing  *erasure             // a delete's history to erase after the answer
	replaced []alarmindex.Indexed // the alarm's index entries an event replaced, removed once it is shipped
	inst     runtime.Instance
	instTier runtime.Tier // the code inst runs (runtime.Tiered)
	needInit bool
	seq      uint64         // the seq its database recorded (upToDate), read as it opens
	logLimit guestlog.Limit // the instance's, shared by stdout and stderr
	stdout   guestlog.Stream
	stderr   guestlog.Stream
	state    eventState
	stack    [3]uint64
	share    fair.Share // its recent CPU: whether, and in what order, it waits for a turn to run guest code
}

func newActor(n *Node, c *class, addr abi.Address, key string, prev *actor) *actor {
	a := &actor{
		node: n, class: c, addr: addr, key: key, prev: prev,
		queue:  mailbox.New[*event](n.opts.QueueLimit),
		evict:  make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
	}
	a.state.actor = a
	a.lastActive.Store(n.clock.Now().UnixNano())
	a.logLimit = n.guestLogs.NewLimit(key)
	a.stdout = guestlog.NewStream(&a.logLimit, "stdout")
	a.stderr = guestlog.NewStream(&a.logLimit, "stderr")
	return a
}

// enqueue adds ev to the mailbox; the caller holds the node's lock.
func (a *actor) enqueue(ev *event) error {
	if !a.queue.Push(ev) {
		return errQueueFull
	}
	return nil
}

func (a *actor) idle() bool { return !a.busy.Load() && a.queue.Len() == 0 }

func (a *actor) requestEviction() {
	select {
	case a.evict <- struct{}{}:
	default:
	}
}

// stopped reports whether stop was called.
func (a *actor) stopped() bool {
	select {
	case <-a.stopCh:
		return true
	default:
		return false
	}
}

func (a *actor) stop() {
	select {
	case <-a.stopCh:
	default:
		close(a.stopCh)
	}
}

// armIdle gives the actor its idle timeout, before anything can run it.
func (a *actor) armIdle() { a.idleTimer = a.node.clock.NewTimer(a.node.opts.IdleTimeout) }

// run is the actor's mailbox loop: one event at a time, in arrival order,
// until it hibernates. Each event, and the hibernation, holds the turn; a
// front-door request may take it between them (runInline).
func (a *actor) run() {
	defer a.node.wg.Done()
	if a.prev != nil {
		<-a.prev.done // its database must be closed before this one opens it
	}
	idle := a.idleTimer
	defer idle.Stop()
	for {
		a.turn.Lock()
		if ev, ok := a.queue.Pop(); ok {
			a.handle(ev) // re-arms idle
			a.turn.Unlock()
			continue
		}
		ran := a.ran
		a.turn.Unlock()
		select {
		case <-a.queue.Ready():
		case <-idle.C():
			a.turn.Lock()
			// An event ran inline (runInline) while this goroutine waited:
			// the fire may have come before that event ended, which armed
			// the timer again. The timeout counts from its end.
			if left := a.idleLeft(); a.ran != ran && left > 0 {
				a.turn.Unlock()
				idle.Reset(left)
				continue
			}
			// A socket closing here has its close event on the way: it runs
			// under this hold, before anything queued after it (an
			// operator's delete waits for it, ends.go), rather than wake the
			// actor again, perhaps on another node and after its delete.
			if !a.node.ws.Closing(a.key) && a.hibernate(true) {
				return // the turn kept: nothing runs this incarnation again
			}
			a.turn.Unlock()
			idle.Reset(a.node.opts.IdleTimeout)
		case <-a.evict:
			if a.hibernateTurn(true) {
				return
			}
		case <-a.stopCh:
			if a.hibernateTurn(false) {
				return
			}
		}
	}
}

// idleLeft is how much of the idle timeout is left since the last event
// ended: at most the whole timeout, should the clock have stepped back.
func (a *actor) idleLeft() time.Duration {
	timeout := a.node.opts.IdleTimeout
	return min(timeout, timeout-a.node.clock.Now().Sub(time.Unix(0, a.lastActive.Load())))
}

// hibernateTurn is hibernate in the actor's turn; once it hibernated, the
// turn is never given back: nothing runs it again.
func (a *actor) hibernateTurn(idleDrop bool) bool {
	a.turn.Lock()
	if a.hibernate(idleDrop) {
		return true
	}
	a.turn.Unlock()
	return false
}

// runInline runs ev, a front-door request, on the request's goroutine
// rather than the actor's (a new actor's first too: deliver), when nothing
// is running or queued for the actor and no admission has claimed its slot
// (its turn taken with TryLock, under the node's lock): it saves two
// goroutine hand-offs, each a thread woken on a node with an idle core (ADR
// 1066). On a node alone only: with a bucket the work after the answer
// (shipping, checkpoints) must not hold the request's response. The node's
// lock is held; runInline releases it if it runs ev, and reports whether it
// did.
func (a *actor) runInline(ev *event) bool {
	if a.node.opts.Cluster != nil || !ev.placed || ev.ws != nil || a.queue.Len() > 0 || a.claim != nil || !a.turn.TryLock() {
		return false
	}
	a.busy.Store(true) // not evictable once the node's lock is released, as a queued event makes it
	a.node.mu.Unlock()
	defer func() {
		a.busy.Store(false) // handle clears it only for an event it runs
		a.turn.Unlock()
	}()
	a.handle(ev)
	return true
}

// hibernate drops the instance and closes the database, unless an event
// arrived meanwhile. From the idle drop (the idle timeout, an eviction;
// not a stop) its hold may be parked rather than released (park).
func (a *actor) hibernate(idleDrop bool) bool {
	if !a.node.retire(a) {
		return false
	}
	a.discardInstance()
	a.closeHeld(context.WithoutCancel(a.node.ctx), idleDrop && !a.stopped())
	close(a.done)
	a.node.closed(a)
	return true
}

func (a *actor) discardInstance() {
	if a.inst == nil {
		return
	}
	a.inst.Close(context.Background())
	a.inst = nil
	a.node.metrics.InstanceDropped(a.class.stateless)
	a.stdout.Flush()
	a.stderr.Flush()
	a.logLimit.EndInstance()
}

// handle runs one event on a thread of its own, so that the CPU clock of
// that thread is the event's.
func (a *actor) handle(ev *event) {
	if ev.ctx.Err() != nil {
		a.node.metrics.Abandoned()
		a.answer(ev, outcome{skipped: true})
		return
	}
	if ev.ws != nil && a.wsActorGone(ev.class) {
		a.answer(ev, outcome{skipped: true})
		return
	}
	a.busy.Store(true)
	start := a.node.clock.Now()
	goruntime.LockOSThread()
	out := a.heldThrough(context.WithoutCancel(a.node.ctx), a.runEvent(ev))
	goruntime.UnlockOSThread()
	kind := metrics.KindRequest
	switch {
	case ev.alarm:
		kind = metrics.KindAlarm
	case ev.ws != nil:
		kind = metrics.KindWebSocket
	}
	end := a.node.clock.Now()
	if !ev.take && ev.del == nil { // a take or a delete job runs none of the actor's code; a take's sender logs how it ended
		a.node.metrics.Event(a.class.name, a.class.stateless, kind, out.err != nil, end.Sub(start))
		if out.err != nil {
			a.logFailure(kind, out.err)
		}
	}
	a.lastActive.Store(end.UnixNano())
	a.ran++
	a.busy.Store(false)
	a.answer(ev, out)
	a.afterAnswer(context.WithoutCancel(a.node.ctx))
}

// answer re-arms the idle timeout, then sends the event's outcome: whoever
// reads the outcome knows the idle timeout counts from before it.
func (a *actor) answer(ev *event, out outcome) {
	if a.idleTimer != nil {
		a.idleTimer.Reset(a.node.opts.IdleTimeout)
	}
	if ev.alarm {
		a.node.alarmEvents.done(a.key)
	}
	ev.reply <- out
}

func (a *actor) runEvent(ev *event) (out outcome) {
	st := &a.state
	*st = eventState{actor: a, out: st.out[:0], params: st.params[:0], chain: ev.chain}
	defer func() {
		if err := a.endEvent(); err != nil {
			out = outcome{err: err}
		}
		// The event's ctx, and its guest calls' with it (guest), ends after
		// endEvent, which stops storage's watch on them
		// (storage.DB.EndEvent): a ctx that ended first would run the
		// watch, on a goroutine of its own, for nothing. endEvent works
		// under context.Background(), not under them.
		if st.cancel != nil {
			st.cancel()
		}
	}()
	notRun := func(err error) outcome {
		if ev.alarm {
			a.alarmNotRun(ev.at)
		}
		return outcome{err: err}
	}

	// The database before the event's wall clock starts: with a bucket,
	// opening it may restore it, under the restore's own bounds (restore
	// steps 5 to 7 of book ADR 0007: 30 s and more for its reads, minutes
	// for a large database), which the wall clock must not cut, or such an
	// actor could never be restored: every event would start the restore
	// again and cut it again.
	if err := a.openHeld(a.node.ctx, ev); errors.Is(err, errNotCreated) {
		if ev.del != nil {
			ev.del.result = deletes.Absent
		}
		return outcome{} // found nowhere: an alarm's entries stay (leaveEntries)
	} else if err != nil {
		return notRun(err)
	}
	if ev.del != nil {
		return a.runDelete(a.node.ctx, ev.del)
	}
	if err := a.upToDate(a.node.ctx, ev); errors.Is(err, errDropped) {
		return outcome{err: err} // its alarm left the timer with the class
	} else if err != nil {
		return notRun(err)
	}
	if ev.take {
		return a.taken(a.node.ctx)
	}
	if ev.alarm {
		if due, err := a.alarmDue(a.node.ctx, ev.at); err != nil {
			return notRun(err)
		} else if !due {
			return outcome{}
		}
	}
	// The wall-clock limit stays on the wall clock: calls and fetches read
	// the event's deadline back (ctx.Deadline), which a deadline armed on
	// n.clock could give only through a context implementation of our own.
	var ctx context.Context
	ctx, st.cancel = context.WithTimeoutCause(a.node.ctx, a.node.opts.WallClock, errWallClock)
	ctx = context.WithValue(ctx, stateKey{}, st)

	a.retireFastTier()
	if err := a.wake(ctx); err != nil {
		return notRun(err)
	}
	if a.needInit {
		err := a.callHook(ctx, abi.ExportOnInit, 0)
		a.node.metrics.Event(a.class.name, a.class.stateless, metrics.KindInit, err != nil, 0)
		if err != nil {
			return notRun(err)
		}
		// After delete-self-durable in on-init there is no database to
		// record it in: the next event starts a new actor.
		if !st.deleted {
			if err := a.recordInit(ctx); err != nil {
				return outcome{err: &failure{public: "internal error", cause: err}}
			}
		}
		a.needInit = false
		st.hookErr = ""
	}
	if ev.alarm {
		return outcome{err: a.runAlarm(ctx)}
	}
	st.pending = ev.payload
	if ev.ws != nil {
		return outcome{err: a.runWebSocket(ctx, ev.ws, uint64(len(ev.payload)))}
	}
	st.isRequest = true
	if err := a.callHook(ctx, abi.ExportOnRequest, uint64(len(ev.payload))); err != nil {
		return outcome{err: err}
	}
	if !st.responded {
		return outcome{resp: abi.Response{Status: 200}}
	}
	return outcome{resp: st.resp}
}

// endEvent rolls back what the event left open and carries out a
// delete-self: the next event then starts a fresh actor (a new database, a
// new instance, on-init again). A held actor's changed alarm is listed in
// the bucket's index before anything of the event is shipped; if it cannot
// be, the actor is given up and the event answers the failure returned.
func (a *actor) endEvent() error {
	st := &a.state
	st.pending = nil
	if a.db != nil {
		if err := a.db.EndEvent(context.Background()); err != nil {
			a.node.log.Error("ending event", "actor", a.key, "err", err)
		}
	}
	if st.deleteAtEnd || st.deleted {
		err := a.removeDatabase()
		if st.deleteAtEnd && !st.deleted { // a durable or operator delete is counted where it ran
			a.node.metrics.Deleted(metrics.DeleteSelf, err)
		}
		if err != nil {
			a.node.log.Error("deleting actor", "actor", a.key, "err", err)
		}
		a.discardInstance()
		a.closeSocketsOnDelete()
	}
	if st.alarmTouched || st.deleteAtEnd || st.deleted {
		a.scheduleFrom(context.Background(), false)
	}
	if st.unheld {
		a.giveUp(context.Background())
		return nil
	}
	if st.alarmTouched && a.stream != nil && a.db != nil {
		if err := a.indexAlarm(context.Background()); err != nil {
			a.abandonForIndex(err)
			a.giveUp(context.Background())
			return unavailable("the node gave the actor up: "+errIndex.Error()+"; the event's writes since the last durable one are lost, retry", err)
		}
	}
	return nil
}

// openDB opens the actor's database unless it is open (or the class has
// none), with the host's tables in it. An alarm delivered to a node with
// no copy of the actor must not create it (book ADR 0009, point 4 and
// R2), nor must an operator's delete (ends.go) or a take (take.go): found
// in the bucket neither, it is given up before anything is written into
// the new database, so nothing of it can be shipped, and openDB returns
// errNotCreated (leaveEntries; dropCopy for a delete; a take's 404).
func (a *actor) openDB(ctx context.Context, ev *event) error {
	if a.db != nil || a.class.stateless {
		return nil
	}
	created := (ev.alarm || ev.take || ev.del != nil) && a.node.replicas != nil && a.node.noDatabase(a.addr)
	var listed bucket.Version
	if ev.del != nil {
		listed = ev.del.expire
	}
	db, err := a.openDatabase(ctx, listed)
	if err != nil {
		return err
	}
	a.db = db
	a.deleted.Store(false)
	if listed != "" {
		ev.del.acquired = true // this job's own acquire, at the version listed
	}
	if created && a.stream.Head().TXID == 0 && ev.take {
		a.dropCopy(ctx)
		return errNoSuchActor
	}
	if created && a.stream.Head().TXID == 0 {
		if ev.del != nil {
			a.dropCopy(ctx)
		} else {
			a.leaveEntries(ctx, ev.at, true)
		}
		return errNotCreated
	}
	a.state.created = created && ev.alarm
	// A database its open created has the host's tables, and no row in
	// them: a new actor's first request runs neither statement.
	a.newDB, a.seq = storage.CreatedByOpen(db), 0
	if !a.newDB {
		if err := a.ensureHostTables(ctx); err != nil {
			return &failure{public: "internal error", cause: err}
		}
		if err := a.readSeq(ctx); err != nil {
			return &failure{public: "internal error", cause: err}
		}
	}
	if a.stream != nil {
		// A hold starts here: the actor's pending alarm, restored with its
		// database or kept by another node until now, is armed on this
		// node's timer (a node alone armed it from its index at start),
		// and listed in the bucket's index unless the database names its
		// entry already: an alarm from before joining the cluster is
		// listed before the hold's first upload (R4), and nothing is
		// uploaded if it cannot be.
		a.scheduleFrom(ctx, true)
		if err := a.indexAlarm(ctx); err != nil {
			a.abandonForIndex(err)
			a.giveUp(ctx)
			return unavailable("the node gave the actor up: "+errIndex.Error()+"; retry", err)
		}
	}
	return nil
}

// retireFastTier drops, between two events, an instance made on a
// module's fast tier once the module's optimised code is ready (ADR 1034),
// so the next event runs on a new instance of the optimised code rather
// than the actor staying on the slower tier for as long as it is resident
// (what it keeps in memory goes, as at hibernation; on-init does not run
// again).
func (a *actor) retireFastTier() {
	if a.inst == nil || a.instTier != runtime.TierFast {
		return
	}
	if t, ok := a.class.current().(runtime.Tiered); ok && t.Tier() == runtime.TierOptimised {
		a.discardInstance()
	}
}

// wake creates an instance, as needed (the database is open: openDB).
func (a *actor) wake(ctx context.Context) error {
	if a.inst != nil {
		return nil
	}
	// The guest's code (its start function, _initialize: Go's package init
	// functions, which may call the host) gets the budget and host state of
	// an event; the engine's own work, the event's wall clock only.
	start := a.node.clock.Now()
	inst, tier, err := a.class.instantiate(ctx, runtime.InstanceConfig{Stdout: &a.stdout, Stderr: &a.stderr,
		Guest: func(ctx context.Context, run func(context.Context) error) error {
			return a.guest(ctx, abi.ExportInitialize, run)
		}})
	if err != nil {
		if f := (*failure)(nil); errors.As(err, &f) {
			return f // guest classified it
		}
		return a.failed(ctx, "instantiate", err)
	}
	a.inst, a.instTier = inst, tier
	a.node.metrics.InstanceCreated(a.class.stateless, a.node.clock.Now().Sub(start))
	if a.needInit, err = a.initPending(ctx); err != nil {
		a.discardInstance()
		return &failure{public: "internal error", cause: err}
	}
	return nil
}

const metaTable = "_wasmkeep_meta"

// initVersionKey names the metadata row that records the module version
// whose on-init last ran to completion: an actor with it has existed.
const initVersionKey = "init_version"

// initPending reports whether on-init must run: the module has it and the
// database has not recorded a successful run for this module version.
func (a *actor) initPending(ctx context.Context) (bool, error) {
	if !a.class.hooks.onInit || a.class.stateless { // no database to record it in
		return false, nil
	}
	if a.newDB {
		return true, nil
	}
	v, ok, err := metaValue(ctx, a.db, initVersionKey)
	return !ok || v != a.class.version, err
}

// metaValue reads one text value of the actor's host metadata; ok is
// false if it is not recorded.
func metaValue(ctx context.Context, db storage.DB, key string) (string, bool, error) {
	v, ok, err := metaRow(ctx, db, key)
	return string(v.Bytes), ok, err
}

// metaRow reads one value of the actor's host metadata as stored (the
// column's affinity keeps a number a number); ok is false if it is not
// recorded.
func metaRow(ctx context.Context, db storage.DB, key string) (abi.Value, bool, error) {
	var w abi.RowsWriter
	if err := db.HostQuery(ctx, "SELECT value FROM "+metaTable+" WHERE key = ?", []abi.Value{text(key)}, &w); err != nil {
		return abi.Value{}, false, err
	}
	r := abi.NewReader(w.Buf)
	if _, n := r.Columns(); n == 0 {
		return abi.Value{}, false, r.Err()
	}
	v := r.Value()
	return v, true, r.Err()
}

func text(s string) abi.Value { return abi.Value{Kind: abi.KindText, Bytes: []byte(s)} }

func (a *actor) recordInit(ctx context.Context) error {
	_, err := a.db.HostExec(ctx, "INSERT OR REPLACE INTO "+metaTable+" (key, value) VALUES (?, ?)",
		text(initVersionKey), text(a.class.version))
	if err == nil {
		a.newDB = false
	}
	return err
}

// guest runs f, which calls into the guest, under the event's CPU budget
// (the guest's own CPU) and its cap (all its CPU, host calls included: it
// stops a running statement or fetch too, through ctx), in a turn of the
// node's cores if the actor uses much CPU (fair.Sched). A failure (a trap, a stop) discards the
// instance and returns a *failure that says which limit stopped it, if one
// did.
func (a *actor) guest(ctx context.Context, what string, f func(ctx context.Context) error) error {
	// The call's ctx, a child of the event's, ends with it (runEvent), not
	// as the call returns: storage watches it until EndEvent, and a watch
	// whose ctx ends runs on a goroutine of its own. stop is a limit's.
	ctx, stop := context.WithCancelCause(ctx)
	budget := a.node.opts.CPUBudget
	a.state.watch = cputime.StartCapped(budget, func() { stop(errCPUBudget) },
		budget+a.node.opts.HostCPUBudget, func() { stop(errHostCPU) })
	// The turn's account reads the watch's clock at both ends: no clock
	// read of its own (issue 30's resident read).
	a.node.cpu.BeginAt(&a.share, a.state.watch.StartClock())
	var cpu time.Duration // the clock as the watch stopped (0 if f panics: its turn is passed on all the same)
	defer func() { a.node.cpu.EndAt(&a.share, cpu) }()
	// Memory growth is host work (ADR 1043), a sleep a wait (ADR 1057);
	// storage bounds its SQL CPU by the thread's since the watch started
	// (cputime.Since).
	err := f(runtime.WithWaiter(runtime.WithHostWork(cputime.NewContext(ctx, a.state.watch), a.state.watch), a))
	_, cpu = a.state.watch.StopAt()
	if err == nil {
		return nil
	}
	a.discardInstance()
	return a.failed(ctx, what, err)
}

// Wait runs f, which waits for something other than the CPU (a sleep, a
// call to another actor, a fetch, an fsync), without the event's turn of
// the node's cores (runtime.Waiter, fair.Sched.Offload).
func (a *actor) Wait(f func()) { a.node.cpu.Offload(&a.share, f) }

// failed returns the *failure for err, which ended what: the limit that
// stopped it, if ctx was stopped, or the actor's failure. The error itself
// is logged unless it is only the engine's interruption: a failure of its
// own (a trap, a refusal) that came while ctx was stopping says what
// happened, which the limit alone would hide.
func (a *actor) failed(ctx context.Context, what string, err error) error {
	stopped := ctx.Err() != nil
	if !errors.Is(err, runtime.ErrInterrupted) {
		msg := "actor failed"
		if stopped {
			msg = "actor failed as it was stopped"
		}
		a.node.log.Warn(msg, "actor", a.key, "in", what, "err", err)
	}
	// A host call that fails because the event was stopped can surface as
	// a trap of its own rather than as the engine's interruption.
	if errors.Is(err, runtime.ErrInterrupted) || stopped {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errCPUBudget):
			a.node.metrics.CPUBudgetExceeded()
			return &failure{public: "actor exceeded its CPU budget", cause: cause}
		case errors.Is(cause, errHostCPU):
			a.node.metrics.Cut(metrics.CutHostCPU)
			return &failure{public: "actor exceeded its CPU budget for host work", cause: cause}
		case errors.Is(cause, errWallClock):
			a.node.metrics.Cut(metrics.CutWall)
			return &failure{public: "actor exceeded its wall-clock limit", cause: cause}
		default:
			return &failure{public: "actor stopped", cause: cause}
		}
	}
	return &failure{public: "actor failed", cause: err}
}

// callHook calls a hook under the event's limits. A hook that fails returns
// a *failure; one that traps or is stopped also loses its instance.
func (a *actor) callHook(ctx context.Context, name string, args ...uint64) error {
	fn := a.inst.Function(name)
	if fn == nil {
		return nil
	}
	copy(a.stack[:], args)
	if err := a.guest(ctx, name, func(ctx context.Context) error { return fn.Call(ctx, a.stack[:]) }); err != nil {
		return err
	}
	if code := int32(a.stack[0]); code != 0 {
		msg := a.state.hookErr
		if msg == "" {
			msg = fmt.Sprintf("%s returned %d", name, code)
		}
		a.node.log.Warn("actor hook failed", "actor", a.key, "hook", name, "err", msg)
		return &failure{public: "actor error: " + msg, cause: errors.New(msg)}
	}
	return nil
}

// runWebSocket calls the hook of a WebSocket event. Without
// on-websocket-open the actor refuses WebSockets.
func (a *actor) runWebSocket(ctx context.Context, ev *wsEvent, n uint64) error {
	switch ev.hook {
	case abi.ExportOnWebSocketOpen:
		if a.inst.Function(ev.hook) == nil {
			return &failure{public: "actor error: this actor accepts no WebSockets", cause: errors.New("no " + ev.hook)}
		}
		return a.callHook(ctx, ev.hook, ev.conn, n)
	case abi.ExportOnWebSocketClose:
		return a.callHook(ctx, ev.hook, ev.conn, uint64(uint32(int32(ev.code))), n)
	}
	return a.callHook(ctx, ev.hook, ev.conn, n)
}
