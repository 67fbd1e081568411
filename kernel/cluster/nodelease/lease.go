package nodelease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
)

// Events are how the lease tells the server what happened. Lapsed, Renewed
// and Lost are called in the order the lease decided them, one at a time:
// each decision queues its event under the lease's lock, and the goroutine
// that decided it (the lapse timer's, the writer's; with a clock.Manual,
// the one moving the clock) then calls what is queued, unless another is
// calling them already, which then calls this one too. So a Renewed never
// overtakes the Lapsed before it. None is called under a lock of the
// lease's; none may block. The lease is not valid again after a lapse
// until Lapsed has returned, so the holds it drops are gone before a
// renewal counts.
type Events struct {
	// Lapsed: the lease ran out with no conflict seen (the bucket did not
	// answer for ttl - safety). Drop every hold into the pending releases
	// and report not ready; the lease keeps writing.
	Lapsed func()
	// Renewed: a write was acknowledged after a lapse; the lease is valid
	// again and the node may acquire afresh, at new generations.
	Renewed func()
	// Lost: another writer replaced nodes/<id> (a fence, a twin, a
	// delete). Drop every hold without releasing anything; the server
	// exits non-zero. Called once; the lease stops writing.
	Lost func(error)
	// Wrote: one write of nodes/<id> ended, with its error (nil: it
	// reached the bucket), for the lease writes and failures metrics.
	Wrote func(error)
}

// Config is what New needs.
type Config struct {
	Bucket   bucket.Bucket
	Clock    clock.Clock
	Settings Settings
	NodeID   string
	Instance string // random per process, [a-z0-9]
	Info     Info
	Events   Events
}

// ErrLost is what Lost and a lost lease's errors wrap.
var ErrLost = errors.New("node lease lost")

// TwinError is the start check's refusal: another process runs with this
// node id.
type TwinError struct {
	NodeID    string
	Advertise string // the other process's address, from its object
	Instance  string
}

func (e *TwinError) Error() string {
	addr := e.Advertise
	if addr == "" {
		addr = "(no address)"
	}
	return fmt.Sprintf("another process runs with node id %q (at %s, instance %s): stop it first, or give this node another id", e.NodeID, addr, e.Instance)
}

// Lease is one process's node lease.
type Lease struct {
	b   bucket.Bucket
	clk clock.Clock
	s   Settings
	id  string
	ins string
	inf Info // read and changed (SetServing, SetTaking) under mu
	// room is Info.Room as each write is sent (SetRoom), read under mu
	// and called outside it; nil: 0.
	room func() int
	ev   Events

	mu      sync.Mutex
	started bool
	version bucket.Version // of the last acknowledged (or adopted) write
	// writtenAt is the latest written_at (wall clock, in ms) of the writes
	// acknowledged or adopted: what peers date this node by, kept by the
	// released write.
	writtenAt time.Time
	// validUntil is this process's own deadline: the latest send time of
	// those writes, as read from the clock, plus Validity. The clock's
	// monotonic reading (clock.Real's) is kept, so a step of the wall
	// clock moves neither validity nor the lapse timer.
	validUntil time.Time
	sent       map[uint64]time.Time // each write's send time by seq, until its validity ended: an adopted write's validity counts from it
	seq        uint64               // the last live write's seq
	lastSend   time.Time
	watchFrom  time.Time // the first acknowledged write after the last lapse
	lapsed     bool
	lost       error
	stopped    bool // locally invalid: a clean stop began
	lapseTimer clock.Timer

	queue      []event // decided, not yet called, in order
	delivering bool    // a goroutine is calling the queued events
	dropping   int     // lapses whose Lapsed has not returned: not valid until 0

	quit chan struct{} // closed by Stop
	done chan struct{} // closed when the writer task returns
}

// New checks cfg; nothing is read or written until Start.
func New(cfg Config) (*Lease, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if err := CheckNodeID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.Instance == "" || CheckNodeID(cfg.Instance) != nil {
		return nil, fmt.Errorf("node lease: instance %q must be 1 to 63 bytes of a-z 0-9 -", cfg.Instance)
	}
	if cfg.Bucket == nil || cfg.Clock == nil {
		return nil, errors.New("node lease: a bucket and a clock are needed")
	}
	return &Lease{b: cfg.Bucket, clk: cfg.Clock, s: cfg.Settings, id: cfg.NodeID, ins: cfg.Instance,
		inf: cfg.Info, ev: cfg.Events, sent: map[uint64]time.Time{}, quit: make(chan struct{}), done: make(chan struct{})}, nil
}

// NodeID is this node's id.
func (l *Lease) NodeID() string { return l.id }

// SetServing changes what the node's next lease writes say it runs
// (Info.Serving: a Serving's String, "" for none) and why it is behind
// (Info.Behind, made one line of at most 300 bytes; "" when it is not).
// It is safe for concurrent use.
func (l *Lease) SetServing(serving, behind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inf.Serving, l.inf.Behind = oneLine(serving, maxBehind), oneLine(behind, maxBehind)
}

// SetTaking changes what the node's next lease writes say of its taking
// actors (Info.Taking) and why it takes none (Info.NotTaking). It is safe
// for concurrent use.
func (l *Lease) SetTaking(t Taking, why []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inf.Taking, l.inf.NotTaking = t, why
}

// SetRoom has each later write say room() as Info.Room, called as the
// write is sent, outside the lease's lock (room may take the node's
// locks). It is safe for concurrent use.
func (l *Lease) SetRoom(room func() int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.room = room
}

// roomNow is Info.Room for a write sent now; l.mu is not held.
func (l *Lease) roomNow() int {
	l.mu.Lock()
	room := l.room
	l.mu.Unlock()
	if room == nil {
		return 0
	}
	return room()
}

// Instance is this process's instance.
func (l *Lease) Instance() string { return l.ins }

// Settings are the lease's timings.
func (l *Lease) Settings() Settings { return l.s }

// Valid reports whether the node may act as owner now: a write was
// acknowledged (or adopted) less than ttl - safety ago by its send time on
// this clock (its monotonic reading, where it has one), every lapse since
// was reported (Lapsed returned), the lease is not lost, and no clean stop
// began.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validLocked(l.clk.Now())
}

func (l *Lease) validLocked(now time.Time) bool {
	return l.version != "" && !l.lapsed && l.dropping == 0 && l.lost == nil && !l.stopped &&
		now.Before(l.validUntil)
}

// Lost is the error that ended the lease, or nil.
func (l *Lease) Lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// WatchFrom is when this node's watch of its peers may start: its first
// acknowledged write after its last lapse (zero before any).
func (l *Lease) WatchFrom() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watchFrom
}

// attempt runs f with a context cancelled after one attempt timeout on
// the lease's clock.
func (l *Lease) attempt(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := clock.WithTimeout(ctx, l.clk, l.s.AttemptTimeout())
	defer cancel()
	return f(ctx)
}

// read reads this node's own object.
func (l *Lease) read(ctx context.Context) (Read, error) { return l.readPeer(ctx, l.id) }

func (l *Lease) put(ctx context.Context, o Object, cond bucket.Condition) (v bucket.Version, err error) {
	err = l.attempt(ctx, func(ctx context.Context) error {
		v, err = writeObject(ctx, l.b, l.id, o, cond)
		return err
	})
	if l.ev.Wrote != nil {
		l.ev.Wrote(err)
	}
	return v, err
}

// ours reports whether r is this process's own live write.
func (l *Lease) ours(r Read) bool { return r.live() && r.Object.Instance == l.ins }

// adoptLocked takes r (this process's own live write) as the last
// acknowledged one; l.mu is held. Its validity counts from its send as
// recorded then, never from a later time: a write whose send is no longer
// recorded (its validity ended) gives none.
func (l *Lease) adoptLocked(r Read) {
	l.seq = max(l.seq, r.Object.Seq)
	l.tookLocked(r.Version, r.Object.WrittenAt, l.sent[r.Object.Seq])
}

// tookLocked records an acknowledged or adopted write: its version, the
// written_at it stores and its send time as read from the clock (zero:
// unknown, no validity); l.mu is held.
func (l *Lease) tookLocked(v bucket.Version, writtenAt, sent time.Time) {
	l.version = v
	if writtenAt.After(l.writtenAt) {
		l.writtenAt = writtenAt
	}
	if !sent.IsZero() && sent.Add(l.s.Validity()).After(l.validUntil) {
		l.validUntil = sent.Add(l.s.Validity())
	}
}

// sendLocked numbers a live write sent now, saying room (roomNow), and
// records its send time, forgetting those whose validity ended; l.mu is
// held.
func (l *Lease) sendLocked(now time.Time, room int) Object {
	for seq, t := range l.sent {
		if !now.Before(t.Add(l.s.Validity())) {
			delete(l.sent, seq)
		}
	}
	l.seq++
	l.sent[l.seq] = now
	l.lastSend = now
	inf := l.inf
	inf.Room = room
	return Object{State: Live, Instance: l.ins, Seq: l.seq, WrittenAt: truncMS(now), Info: inf}
}

// Start runs the start check, then the first write, again until both pass,
// and then starts the writer task. It returns a *TwinError when another
// process runs with this id, ctx's error if it ends first. Start is called
// once, before the node acquires anything.
func (l *Lease) Start(ctx context.Context) error {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return errors.New("node lease: started twice")
	}
	l.started = true
	l.mu.Unlock()
	for {
		last, adopted, err := l.check(ctx)
		if err != nil {
			return err
		}
		if adopted || l.first(ctx, last) {
			break
		}
	}
	l.mu.Lock()
	l.watchFrom = l.clk.Now()
	l.armLapseLocked()
	l.mu.Unlock()
	go l.run()
	return nil
}

// check is the start check (book, Running a cluster, Flags): nodes/<id>
// read every half period for ttl + grace of successful reads. A live
// object that changes (or appears) between reads is another process: a
// TwinError. A fenced or released object naming the instance first read
// ends the wait once its kept written_at + ttl + grace has passed here.
// A live object naming this instance is this process's own first write,
// landed late: it is adopted. It returns the last read.
func (l *Lease) check(ctx context.Context) (last Read, adopted bool, err error) {
	var first, prev *Read
	var start time.Time
	for {
		r, rerr := l.read(ctx)
		now := l.clk.Now()
		if rerr == nil {
			if l.ours(r) {
				l.mu.Lock()
				l.adoptLocked(r)
				l.mu.Unlock()
				return r, true, nil
			}
			if first == nil {
				first, start = &r, now
			} else if !r.same(*prev) && r.live() {
				return r, false, &TwinError{NodeID: l.id, Advertise: r.Object.Info.Advertise, Instance: r.Object.Instance}
			}
			prev = &r
			lapsed := first.Found && first.Err == nil && prev != first && r.Found && r.Err == nil &&
				r.Object.State != Live && r.Object.Instance == first.Object.Instance &&
				!now.Before(r.Object.WrittenAt.Add(l.s.Takeover()))
			if lapsed || now.Sub(start) >= l.s.Takeover() {
				return r, false, nil
			}
		}
		if err := clock.Sleep(ctx, l.clk, l.s.Period()/2); err != nil {
			return Read{}, false, err
		}
	}
}

// first is the first write after a start check that last read last: a
// create if it found nothing, else If-Match on its version. On a failure,
// nodes/<id> is read once: this process's own live object is adopted;
// anything else sends Start back to the check.
func (l *Lease) first(ctx context.Context, last Read) bool {
	cond := bucket.Condition{IfAbsent: true}
	if last.Found {
		cond = bucket.Condition{IfVersion: last.Version}
	}
	room := l.roomNow()
	l.mu.Lock()
	now := l.clk.Now()
	o := l.sendLocked(now, room)
	l.mu.Unlock()
	v, err := l.put(ctx, o, cond)
	if err == nil {
		l.mu.Lock()
		l.tookLocked(v, o.WrittenAt, now)
		l.mu.Unlock()
		return true
	}
	r, rerr := l.read(ctx)
	if rerr != nil || !l.ours(r) {
		return false
	}
	l.mu.Lock()
	l.adoptLocked(r)
	l.mu.Unlock()
	return true
}

func truncMS(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// armLapseLocked arms the timer that reports a lapse at the end of the
// current validity; l.mu is held.
func (l *Lease) armLapseLocked() {
	d := l.validUntil.Sub(l.clk.Now())
	if l.lapseTimer != nil {
		l.lapseTimer.Reset(d)
		return
	}
	l.lapseTimer = l.clk.AfterFunc(d, l.checkLapse)
}

func (l *Lease) checkLapse() {
	l.mu.Lock()
	if !l.lapsed && l.lost == nil && !l.stopped && l.version != "" && !l.clk.Now().Before(l.validUntil) {
		l.lapsed = true
		l.dropping++
		l.emitLocked(event{lapse: true})
	}
	l.mu.Unlock()
	l.deliver()
}

// event is one of Lapsed (lapse), Renewed (renew) and Lost (lost != nil).
type event struct {
	lapse, renew bool
	lost         error
}

// emitLocked queues e; l.mu is held. The caller calls deliver once it let
// go of l.mu.
func (l *Lease) emitLocked(e event) { l.queue = append(l.queue, e) }

// deliver calls the queued events in order, unless another goroutine is
// calling them (it then calls these too).
func (l *Lease) deliver() {
	l.mu.Lock()
	if l.delivering {
		l.mu.Unlock()
		return
	}
	l.delivering = true
	for len(l.queue) > 0 {
		e := l.queue[0]
		l.queue = l.queue[1:]
		l.mu.Unlock()
		switch {
		case e.lapse && l.ev.Lapsed != nil:
			l.ev.Lapsed()
		case e.renew && l.ev.Renewed != nil:
			l.ev.Renewed()
		case e.lost != nil && l.ev.Lost != nil:
			l.ev.Lost(e.lost)
		}
		l.mu.Lock()
		if e.lapse {
			l.dropping--
		}
	}
	l.delivering = false
	l.mu.Unlock()
}

// run is the writer task: a write every period from the previous send, a
// failed one tried again a third of a period later (within the period).
func (l *Lease) run() {
	defer close(l.done)
	next := l.s.Period()
	for {
		t := l.clk.NewTimer(next)
		select {
		case <-l.quit:
			t.Stop()
			return
		case <-t.C():
		}
		ok, stop := l.renew()
		if stop {
			return
		}
		l.mu.Lock()
		now := l.clk.Now()
		next = l.lastSend.Add(l.s.Period()).Sub(now)
		if !ok {
			next = min(next, l.s.Period()/3)
		}
		l.mu.Unlock()
	}
}

// renew sends one lease write, If-Match on the last acknowledged version.
// A conflict reads nodes/<id> once: this process's own live object is
// adopted (its reply was lost); anything else loses the lease.
func (l *Lease) renew() (ok, stop bool) {
	room := l.roomNow()
	l.mu.Lock()
	if l.lost != nil || l.stopped {
		l.mu.Unlock()
		return false, true
	}
	now := l.clk.Now()
	o := l.sendLocked(now, room)
	cond := bucket.Condition{IfVersion: l.version}
	l.mu.Unlock()

	v, err := l.put(context.Background(), o, cond)
	if err == nil {
		l.acknowledged(func() { l.tookLocked(v, o.WrittenAt, now) })
		return true, false
	}
	if !errors.Is(err, bucket.ErrPrecondition) {
		return false, false // a lost reply shows as a conflict next time
	}
	r, rerr := l.read(context.Background())
	if rerr != nil {
		return false, false // undecided: the next write asks again
	}
	if l.ours(r) {
		l.acknowledged(func() { l.adoptLocked(r) })
		return true, false
	}
	l.lose(r)
	return false, true
}

// acknowledged records an acknowledged (or adopted) write with take,
// under l.mu, unless the lease was lost: a renewal after a lapse, and the
// lapse timer armed again.
func (l *Lease) acknowledged(take func()) {
	l.mu.Lock()
	if l.lost != nil {
		l.mu.Unlock()
		return
	}
	take()
	if now := l.clk.Now(); l.lapsed && now.Before(l.validUntil) {
		l.lapsed = false
		l.watchFrom = now
		l.emitLocked(event{renew: true})
	}
	if !l.stopped {
		l.armLapseLocked()
	}
	l.mu.Unlock()
	l.deliver()
}

func (l *Lease) lose(r Read) {
	var what string
	switch {
	case !r.Found:
		what = "nodes/" + l.id + " was deleted"
	case r.Err != nil:
		what = "nodes/" + l.id + " was overwritten: " + r.Err.Error()
	case r.Object.State == Fenced:
		what = "this node was fenced"
	case r.Object.Instance != l.ins:
		what = fmt.Sprintf("another process (instance %s, at %s) writes nodes/%s", r.Object.Instance, r.Object.Info.Advertise, l.id)
	default:
		what = "nodes/" + l.id + " was written " + string(r.Object.State)
	}
	err := fmt.Errorf("%w: %s", ErrLost, what)
	l.mu.Lock()
	if l.lost == nil {
		l.lost = err
		if l.lapseTimer != nil {
			l.lapseTimer.Stop()
		}
		l.emitLocked(event{lost: err})
	}
	l.mu.Unlock()
	l.deliver()
}

// Stop is a clean stop's end (book ADR 0020 section 4), once every hold
// was released: the lease becomes invalid here at once, the writer task
// stops after the attempt it has in flight, and nodes/<id> is written
// released, If-Match on the last acknowledged version, keeping its
// written_at. A conflict reads once: this process's own live object is
// adopted and the write tried again; anything else ends the stop (a fence
// already freed the records). A failing write is tried again for one
// attempt timeout and a second more, within ctx; past that the lease stays
// live and Stop returns the error.
func (l *Lease) Stop(ctx context.Context) error {
	l.mu.Lock()
	started := l.started
	l.stopped = true
	if l.lapseTimer != nil {
		l.lapseTimer.Stop()
	}
	l.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var deadline time.Time
	for {
		l.mu.Lock()
		if l.lost != nil {
			l.mu.Unlock()
			return nil
		}
		o := Object{State: Released, Instance: l.ins, Seq: l.seq, WrittenAt: l.writtenAt, Info: l.inf}
		cond := bucket.Condition{IfVersion: l.version}
		l.mu.Unlock()
		_, err := l.put(ctx, o, cond)
		if err == nil {
			return nil
		}
		if errors.Is(err, bucket.ErrPrecondition) {
			r, rerr := l.read(ctx)
			if rerr == nil {
				if !l.ours(r) {
					return nil // fenced, or replaced: nothing of ours to release
				}
				l.mu.Lock()
				l.adoptLocked(r)
				l.mu.Unlock()
				continue
			}
		}
		now := l.clk.Now()
		if deadline.IsZero() {
			deadline = now.Add(l.s.AttemptTimeout() + time.Second)
		}
		if !now.Before(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node lease: writing released: %w (the lease stays live: peers free this node's actors by fencing it)", err)
		}
		if err := clock.Sleep(ctx, l.clk, min(l.s.Period()/3, deadline.Sub(now))); err != nil {
			return err
		}
	}
}
