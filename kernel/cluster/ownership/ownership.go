// Package ownership is the ownership records owners/<tenant>/<class>/<name>,
// under an app's state root (ADR 1045)
// (book ADR 0020 section 3): which node, and which process of it, holds an
// actor, with a generation of its own for every hold. A hold starts with an
// acquisition (a conditional create, or a conditional replace of a record
// that names nobody, this process, or a holder its node lease frees) and
// ends with a release (the record naming nobody, If-Match on the
// acquisition's version, generation kept). Releases that did not land and
// acquisitions whose outcome is unknown are kept and resolved by a
// background pass, under one lock per actor. A hold that hibernates with
// sockets open on its node may be parked instead of released (ADR 1055):
// the record stays naming this process, nothing acts under it, and it is
// released later (its last socket, a drain, a clean stop, a lapse) or
// replaced by the next acquisition here. It is logic over a bucket, a
// clock and the node lease (the small Lease interface), with no network
// and no wall-clock call of its own.
package ownership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// Lease is what ownership needs of the node lease (*nodelease.Lease has
// it).
type Lease interface {
	// Valid: the node may act as owner now.
	Valid() bool
	// Instance is this process's instance.
	Instance() string
	// NodeID is this node's id.
	NodeID() string
}

var _ Lease = (*nodelease.Lease)(nil)

// Actor names an actor; each part is already a valid key segment.
type Actor struct{ Tenant, Class, Name string }

// Prefix is where every ownership record is.
const Prefix = "owners/"

// Key is the actor's record key.
func (a Actor) Key() string { return Prefix + a.Tenant + "/" + a.Class + "/" + a.Name }

func (a Actor) String() string { return a.Tenant + "/" + a.Class + "/" + a.Name }

// Header is the first line of a record.
const Header = "wasmkeep-owner 1"

// Record is an ownership record: a node and its instance holding the
// actor at a generation, or nobody (Node "") keeping the last generation,
// and, released by a move, the node it moves to (Next).
type Record struct {
	Node, Instance string
	Generation     uint64
	Next           Successor
}

// Successor is the node a move releases an actor to (ADR 1070): its
// process, and until when the other nodes send the actor's events there
// rather than claiming it, so a third node's event does not win the race
// with the take call. It decides no ownership: a record naming nobody is
// free to any acquisition, the successor's or not.
type Successor struct {
	Node, Instance string
	Until          time.Time
}

// same reports whether s and t name one successor (its time to the
// millisecond, as a record keeps it).
func (s Successor) same(t Successor) bool {
	return s.Node == t.Node && s.Instance == t.Instance && s.Until.UnixMilli() == t.Until.UnixMilli()
}

// Nobody reports whether the record names no holder.
func (r Record) Nobody() bool { return r.Node == "" }

// Encode renders r: the header, then "<node> <instance> <generation>",
// "- - <generation>" for nobody, then for nobody with a successor
// "next <node> <instance> <until, Unix ms>".
func (r Record) Encode() []byte {
	n, i := r.Node, r.Instance
	if r.Nobody() {
		n, i = "-", "-"
	}
	b := fmt.Appendf(nil, "%s\n%s %s %d\n", Header, n, i, r.Generation)
	if r.Nobody() && r.Next.Node != "" && r.Next.Instance != "" {
		b = fmt.Appendf(b, "next %s %s %d\n", r.Next.Node, r.Next.Instance, r.Next.Until.UnixMilli())
	}
	return b
}

// Decode parses a record.
func Decode(b []byte) (Record, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 2 || len(lines) > 3 || lines[0] != Header {
		return Record{}, fmt.Errorf("not a %q record", Header)
	}
	f := strings.Fields(lines[1])
	if len(f) != 3 || (f[0] == "-") != (f[1] == "-") {
		return Record{}, fmt.Errorf("line 2 %q is not <node> <instance> <generation>", lines[1])
	}
	g, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("generation %q: %v", f[2], err)
	}
	if f[0] != "-" {
		if len(lines) == 3 {
			return Record{}, errors.New("a record naming a holder has no line 3")
		}
		return Record{Node: f[0], Instance: f[1], Generation: g}, nil
	}
	r := Record{Generation: g}
	if len(lines) == 3 {
		n := strings.Fields(lines[2])
		if len(n) != 4 || n[0] != "next" || n[1] == "-" || n[2] == "-" {
			return Record{}, fmt.Errorf("line 3 %q is not next <node> <instance> <until>", lines[2])
		}
		until, err := strconv.ParseInt(n[3], 10, 64)
		if err != nil {
			return Record{}, fmt.Errorf("next's until %q: %v", n[3], err)
		}
		r.Next = Successor{Node: n[1], Instance: n[2], Until: time.UnixMilli(until)}
	}
	return r, nil
}

// Hold is one acquisition of an actor by this process.
type Hold struct {
	Actor      Actor
	Generation uint64
	Version    bucket.Version // the record's version while the hold lasts
	// TookOver: the record named another process that had not released
	// the actor (a fenced, stopped or restarted node's).
	TookOver bool
	// Unparked: the acquisition replaced a record this process had
	// parked (a wake of a room at its sockets' node, ADR 1055).
	Unparked bool
}

var (
	// ErrLeaseInvalid: the node lease is not valid; nothing was written.
	ErrLeaseInvalid = errors.New("ownership: the node lease is not valid")
	// ErrUnresolved: the acquisition's outcome is unknown; it is kept and
	// resolved in the background (a landed write is released there).
	ErrUnresolved = errors.New("ownership: the acquisition's outcome is unknown")
	// ErrReleasePending: the release did not land; it is retried in the
	// background.
	ErrReleasePending = errors.New("ownership: the release is pending")
)

// HeldError: another holder, whose node lease does not free the record,
// holds the actor; requests go to Record.Node.
type HeldError struct{ Record Record }

func (e *HeldError) Error() string {
	return fmt.Sprintf("ownership: held by node %s (instance %s, generation %d)", e.Record.Node, e.Record.Instance, e.Record.Generation)
}

// Config is what New needs.
type Config struct {
	// Bucket holds the records: the app's state view (bucket.Under its
	// state root), whose owners/ are its actors' alone.
	Bucket bucket.Bucket
	// Nodes holds the node leases a holder is judged by (nodes/): the
	// shared root; nil: Bucket (a test's single bucket).
	Nodes    bucket.Bucket
	Clock    clock.Clock
	Lease    Lease
	Settings nodelease.Settings // ttl + grace frees a fenced or released holder
	// Floor is the highest generation the actor's history in the bucket
	// holds (0 for none), read when the actor has no record: its first
	// acquisition takes the generation after it, so that a record deleted
	// while its history stayed never makes a hold write a generation that
	// history already holds. nil: 0.
	Floor func(ctx context.Context, a Actor) (uint64, error)
}

// OwnerTimeout bounds the routing read of a record (ADMISSION_WAIT).
const OwnerTimeout = 250 * time.Millisecond

// FloorTimeout bounds the read of an actor's history generations (Config.
// Floor): a listing of every key of its history, which for a busy actor
// takes many pages, so the restore's own bound for its reads rather than
// one lease attempt, which such an actor would exceed at every try.
const FloorTimeout = 30 * time.Second

// ReleaseTimeout bounds a foreground release (RELEASE_TRIES): hibernation
// and hand-overs do not wait on a slow bucket; the pass retries with the
// full attempt timeout.
const ReleaseTimeout = time.Second

// MaxRefusals is how many entries in a row may fail to end before a pass
// stops, so a refusing or throttling bucket gets no burst of writes.
const MaxRefusals = 32

type kind int

const (
	release kind = iota // a release that did not land
	acquire             // an acquisition whose outcome is unknown
)

// entry is a pending release (version is the acquisition's) or an
// unresolved acquire (prior is the record body it was conditioned on,
// nil if none).
type entry struct {
	kind       kind
	actor      Actor
	generation uint64
	version    bucket.Version
	prior      []byte
	since      time.Time
}

// actorLock is a channel with room for one, so a goroutine waiting for it
// is durably blocked (testing/synctest sees it settle).
type actorLock struct {
	ch chan struct{}
	n  int
}

// Owners holds this process's holds and its pending entries.
type Owners struct {
	b     bucket.Bucket // the records
	nodes bucket.Bucket // the node leases
	clk   clock.Clock
	lease Lease
	s     nodelease.Settings
	floor func(ctx context.Context, a Actor) (uint64, error)

	mu      sync.Mutex
	locks   map[Actor]*actorLock
	holds   map[Actor]Hold
	parked  map[Actor]Hold // holds ended here whose record is kept (Park)
	pending []*entry
}

// New returns an Owners with no hold.
func New(cfg Config) (*Owners, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bucket == nil || cfg.Clock == nil || cfg.Lease == nil {
		return nil, errors.New("ownership: a bucket, a clock and a lease are needed")
	}
	nodes := cfg.Nodes
	if nodes == nil {
		nodes = cfg.Bucket
	}
	return &Owners{b: cfg.Bucket, nodes: nodes, clk: cfg.Clock, lease: cfg.Lease, s: cfg.Settings, floor: cfg.Floor,
		locks: map[Actor]*actorLock{}, holds: map[Actor]Hold{}, parked: map[Actor]Hold{}}, nil
}

// lock takes the actor's lock; the returned func gives it back.
func (o *Owners) lock(a Actor) func() {
	o.mu.Lock()
	l := o.locks[a]
	if l == nil {
		l = &actorLock{ch: make(chan struct{}, 1)}
		o.locks[a] = l
	}
	l.n++
	o.mu.Unlock()
	l.ch <- struct{}{}
	return func() {
		<-l.ch
		o.mu.Lock()
		if l.n--; l.n == 0 {
			delete(o.locks, a)
		}
		o.mu.Unlock()
	}
}

func (o *Owners) bounded(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := clock.WithTimeout(ctx, o.clk, d)
	defer cancel()
	return f(ctx)
}

// read is one GET of the actor's record; found is false when absent.
func (o *Owners) read(ctx context.Context, a Actor, d time.Duration) (rec Record, body []byte, v bucket.Version, found bool, err error) {
	err = o.bounded(ctx, d, func(ctx context.Context) error {
		obj, err := o.b.Get(ctx, a.Key(), bucket.GetOptions{})
		if errors.Is(err, bucket.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer obj.Body.Close()
		if body, err = io.ReadAll(io.LimitReader(obj.Body, 4<<10)); err != nil {
			return err
		}
		found, v = true, obj.Version
		rec, err = Decode(body)
		return err
	})
	if err != nil {
		err = fmt.Errorf("ownership: reading %s: %w", a.Key(), err)
	}
	return rec, body, v, found, err
}

func (o *Owners) put(ctx context.Context, a Actor, r Record, cond bucket.Condition) (bucket.Version, error) {
	return o.putWithin(ctx, o.s.AttemptTimeout(), a, r, cond)
}

func (o *Owners) putWithin(ctx context.Context, d time.Duration, a Actor, r Record, cond bucket.Condition) (v bucket.Version, err error) {
	body := r.Encode()
	err = o.bounded(ctx, d, func(ctx context.Context) error {
		v, err = o.b.Put(ctx, a.Key(), bytes.NewReader(body), int64(len(body)), cond)
		return err
	})
	return v, err
}

// ours reports whether r names this process at generation g.
func (o *Owners) ours(r Record, g uint64) bool {
	return r.Node == o.lease.NodeID() && r.Instance == o.lease.Instance() && r.Generation == g
}

// free reports whether a record read just before may be replaced: it
// names nobody, this process, or a holder whose node lease, read now
// (after the record), names another instance live, or is fenced or
// released with its written_at + ttl + grace passed on this clock. An
// absent or unreadable nodes/<id> frees nothing.
func (o *Owners) free(ctx context.Context, r Record) (bool, error) {
	if r.Nobody() || r.Node == o.lease.NodeID() && r.Instance == o.lease.Instance() {
		return true, nil
	}
	var n nodelease.Read
	err := o.bounded(ctx, o.s.AttemptTimeout(), func(ctx context.Context) (err error) {
		n, err = nodelease.ReadObject(ctx, o.nodes, r.Node)
		return err
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("ownership: reading nodes/%s: %w", r.Node, err)
	case !n.Found || n.Err != nil:
		return false, nil
	}
	return n.Object.Frees(r.Instance, o.clk.Now(), o.s), nil
}

// Acquire takes the actor for this process, under the actor's lock: the
// hold it has already, or a new one at a generation above the record's.
// It returns a *HeldError when another holder keeps it, ErrLeaseInvalid
// while the node lease is not valid, ErrUnresolved when the write's
// outcome is unknown (kept for the background pass).
func (o *Owners) Acquire(ctx context.Context, a Actor) (Hold, error) {
	return o.acquire(ctx, a, "")
}

// ErrChanged refuses AcquireUnchanged: the record is not the one listed,
// names a holder, or this process holds the actor already.
var ErrChanged = errors.New("ownership: the record changed since it was listed, or the actor is held")

// AcquireUnchanged is Acquire of an actor whose record names nobody and
// is still at the version listed (an idle actor's expiry, ADR 1053): the
// record read must name nobody and the write is conditioned on listed, so
// a wake since the listing (which rewrote the record) makes it fail with
// ErrChanged. A hold this process has already is never taken.
func (o *Owners) AcquireUnchanged(ctx context.Context, a Actor, listed bucket.Version) (Hold, error) {
	return o.acquire(ctx, a, listed)
}

func (o *Owners) acquire(ctx context.Context, a Actor, listed bucket.Version) (Hold, error) {
	defer o.lock(a)()
	o.mu.Lock()
	h, ok := o.holds[a]
	p, parked := o.parked[a]
	if !ok && parked && bugs.AdoptParked && o.lease.Valid() { // false unless a simulation test plants the bug
		delete(o.parked, a)
		o.holds[a], h, ok = p, p, true
	}
	o.mu.Unlock()
	switch {
	case ok && listed != "":
		return Hold{}, ErrChanged
	case ok:
		return h, nil
	}
	if !o.lease.Valid() {
		return Hold{}, ErrLeaseInvalid
	}
	h, err := o.claim(ctx, a, listed)
	var held *HeldError
	if parked && (err == nil || errors.As(err, &held)) {
		// The record moved past the parked hold: replaced by this
		// acquisition, or by another holder's. A wake that wrote nothing
		// or whose outcome is unknown keeps it: the record may still name
		// the parked hold, which only its entry can release.
		o.mu.Lock()
		delete(o.parked, a)
		o.mu.Unlock()
		h.Unparked = err == nil
	}
	return h, err
}

// claim is acquire's read and conditional write, under the actor's
// lock, with no hold here (at the version listed, when one is).
func (o *Owners) claim(ctx context.Context, a Actor, listed bucket.Version) (Hold, error) {
	cur, prior, r, found, err := o.read(ctx, a, o.s.AttemptTimeout())
	if err != nil {
		return Hold{}, err
	}
	next, cond := uint64(1), bucket.Condition{IfAbsent: true}
	if !found && o.floor != nil {
		var floor uint64
		err := o.bounded(ctx, FloorTimeout, func(ctx context.Context) (err error) {
			floor, err = o.floor(ctx, a)
			return err
		})
		if err != nil {
			return Hold{}, fmt.Errorf("ownership: reading the history's generations of %s: %w", a, err)
		}
		next = floor + 1
	}
	if listed != "" && (!found || !cur.Nobody()) {
		return Hold{}, ErrChanged
	}
	if found {
		free, err := o.free(ctx, cur)
		if err != nil {
			return Hold{}, err
		}
		if !free {
			return Hold{}, &HeldError{Record: cur}
		}
		next, cond = cur.Generation+1, bucket.Condition{IfVersion: r}
		next -= bugs.Reused(cur.Nobody()) // 0 unless a simulation test plants the bug
	}
	if listed != "" {
		cond.IfVersion = listed
	}
	if !o.lease.Valid() {
		return Hold{}, ErrLeaseInvalid
	}
	rec := Record{Node: o.lease.NodeID(), Instance: o.lease.Instance(), Generation: next}
	took := found && !cur.Nobody() && !o.ours(cur, cur.Generation)
	v, err := o.put(ctx, a, rec, cond)
	if err == nil {
		return o.register(Hold{Actor: a, Generation: next, Version: v, TookOver: took}), nil
	}
	// The write may have landed (a lost reply, a retry's conflict) or may
	// still land: read once, still under the lock.
	back, body, bv, bfound, berr := o.read(ctx, a, o.s.AttemptTimeout())
	if berr == nil && bfound && o.ours(back, next) {
		return o.register(Hold{Actor: a, Generation: next, Version: bv, TookOver: took}), nil
	}
	if berr == nil && bfound && !bytes.Equal(body, prior) && !back.Nobody() {
		if free, ferr := o.free(ctx, back); ferr == nil && !free {
			return Hold{}, &HeldError{Record: back}
		}
	}
	if listed != "" && berr == nil && errors.Is(err, bucket.ErrPrecondition) {
		// Not ours, and the record is no longer at listed: no attempt of
		// this write can land later.
		return Hold{}, ErrChanged
	}
	o.keep(&entry{kind: acquire, actor: a, generation: next, prior: prior, since: o.clk.Now()})
	return Hold{}, fmt.Errorf("%w: %s at generation %d: %v", ErrUnresolved, a, next, err)
}

func (o *Owners) register(h Hold) Hold {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.holds[h.Actor] = h
	return h
}

func (o *Owners) keep(e *entry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending = append(o.pending, e)
}

// Owns reports whether this process owns the actor now: it holds it and
// the node lease is valid.
func (o *Owners) Owns(a Actor) (Hold, bool) {
	o.mu.Lock()
	h, ok := o.holds[a]
	o.mu.Unlock()
	return h, ok && o.lease.Valid()
}

// ErrNotHeld is Check's refusal: the hold ended here (released, dropped
// by a lapse of the node lease, lost), or the node lease is not valid now.
var ErrNotHeld = errors.New("ownership: this process no longer holds the actor")

// Holding reports whether h is still this process's hold, the very one
// (same generation and version), while the node lease is valid on its
// clock now. A lapse drops every hold (DropAll), so a hold acquired before
// a lapse is never held again, even once the lease is renewed.
//
// The lease is read first: a hold found afterwards was held when the lease
// was read valid (it was registered before the caller had it). Read the
// other way round, a lapse, its DropAll and a renewal could all fall
// between the two reads and pass a hold already dropped.
func (o *Owners) Holding(h Hold) bool {
	if !o.lease.Valid() {
		return false
	}
	o.mu.Lock()
	cur, ok := o.holds[h.Actor]
	o.mu.Unlock()
	return ok && cur.Generation == h.Generation && cur.Version == h.Version
}

// Check is the rule every event of a held actor passes where it executes
// (the node's actor before each event, the simulation's session alike):
// nil while Holding(h), ErrNotHeld once the hold ended. An event refused
// here never runs on that copy of the actor: it is placed again.
func (o *Owners) Check(h Hold) error {
	if bugs.SkipHoldCheck { // false unless a simulation test plants the bug
		return nil
	}
	if !o.Holding(h) {
		return fmt.Errorf("%w: %s at generation %d", ErrNotHeld, h.Actor, h.Generation)
	}
	return nil
}

// Release ends the hold (hibernation, a clean stop, a drain, a move, an
// abandoned hold): this process stops acting as owner at once, then
// writes the record naming nobody, If-Match on the hold's version,
// generation kept. If that does not land it is kept as a pending release
// and ErrReleasePending returned. A hold that already ended here (a
// lapse's DropAll, a loss's Abandon) writes nothing.
func (o *Owners) Release(ctx context.Context, h Hold) error {
	return o.ReleaseTo(ctx, h, Successor{})
}

// ReleaseTo is Release whose record names next, the node a move hands the
// actor to (ADR 1070). A release kept pending is retried without it: by
// then the move is over.
func (o *Owners) ReleaseTo(ctx context.Context, h Hold, next Successor) error {
	defer o.lock(h.Actor)()
	o.mu.Lock()
	cur, ok := o.holds[h.Actor]
	ok = ok && cur.Generation == h.Generation
	if ok {
		delete(o.holds, h.Actor)
	}
	pending := o.pendingLocked(h)
	o.mu.Unlock()
	if !ok { // ended already: by a lapse (pending) or a loss (nothing to write)
		if pending {
			return fmt.Errorf("%w: %s generation %d", ErrReleasePending, h.Actor, h.Generation)
		}
		return nil
	}
	return o.writeRelease(ctx, h, bucket.Condition{IfVersion: h.Version}, next)
}

// writeRelease writes the record naming nobody at h's generation (and
// next, if any) under cond, kept as a pending release if that does not
// land; the actor's lock is held and h is no longer held nor parked here.
func (o *Owners) writeRelease(ctx context.Context, h Hold, cond bucket.Condition, next Successor) error {
	nobody := Record{Generation: h.Generation, Next: next}
	if _, err := o.putWithin(ctx, min(ReleaseTimeout, o.s.AttemptTimeout()), h.Actor, nobody, cond); err != nil {
		o.keep(&entry{kind: release, actor: h.Actor, generation: h.Generation, version: h.Version, since: o.clk.Now()})
		return fmt.Errorf("%w: %s generation %d: %v", ErrReleasePending, h.Actor, h.Generation, err)
	}
	return nil
}

// ClearSuccessor rewrites the record of a, if it names nobody and next
// (the successor this process's release named), naming nobody alone,
// If-Match on the version read: a move whose take failed ends its
// successor's time at once (ADR 1070), so the actor's events no longer go
// to a node that did not take it. A record acquired since, or released
// since to another successor, is left as it is.
func (o *Owners) ClearSuccessor(ctx context.Context, a Actor, next Successor) error {
	if next.Node == "" {
		return nil
	}
	defer o.lock(a)()
	rec, _, v, found, err := o.read(ctx, a, o.s.AttemptTimeout())
	if err != nil || !found || !rec.Nobody() || !rec.Next.same(next) {
		return err
	}
	cond := bucket.Condition{IfVersion: v}
	if bugs.UnconditionalSuccessorClear { // false unless a simulation test plants the bug
		cond = bucket.Condition{}
	}
	_, err = o.put(ctx, a, Record{Generation: rec.Generation}, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		return nil
	}
	return err
}

// Park ends h here as a release does (nothing acts under it from now on)
// but writes nothing: the record keeps naming this process at h's
// generation, so other nodes route the actor's events here, where the
// next one acquires it anew at a later generation (a hibernation with
// sockets open on this node, ADR 1055). The hold leaves the live set and
// enters the parked one in one step, and only while it may still act: the
// node lease is valid and h is still this process's hold. It reports
// whether it parked h; if not, the caller releases it as before.
func (o *Owners) Park(h Hold) bool {
	if !o.lease.Valid() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, ok := o.holds[h.Actor]
	if !ok || cur.Generation != h.Generation || cur.Version != h.Version {
		return false
	}
	delete(o.holds, h.Actor)
	o.parked[h.Actor] = h
	return true
}

// ParkedCount is how many records this process keeps parked.
func (o *Owners) ParkedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.parked)
}

// Parked reports whether this process keeps the actor's record parked.
func (o *Owners) Parked(a Actor) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.parked[a]
	return ok
}

// ParkedActors lists the actors whose records this process keeps parked,
// in actor order.
func (o *Owners) ParkedActors() []Actor {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.parkedLocked()
}

// parkedLocked is the parked actors in actor order (a seeded simulation
// replays their releases exactly); o.mu is held.
func (o *Owners) parkedLocked() []Actor {
	as := make([]Actor, 0, len(o.parked))
	for a := range o.parked {
		as = append(as, a)
	}
	slices.SortFunc(as, func(a, b Actor) int { return strings.Compare(a.Key(), b.Key()) })
	return as
}

// ReleaseParked releases the actor's parked record, under the actor's
// lock (a wake and a release never interleave): the record naming nobody,
// If-Match on the parked hold's version, generation kept, within
// ReleaseTimeout of its own; one that does not land is kept as a pending
// release and ErrReleasePending returned. It reports whether there was a
// parked record to release.
func (o *Owners) ReleaseParked(ctx context.Context, a Actor) (bool, error) {
	return o.ReleaseParkedTo(ctx, a, Successor{})
}

// ReleaseParkedTo is ReleaseParked whose record names next (ReleaseTo).
func (o *Owners) ReleaseParkedTo(ctx context.Context, a Actor, next Successor) (bool, error) {
	defer o.lock(a)()
	o.mu.Lock()
	h, ok := o.parked[a]
	delete(o.parked, a)
	o.mu.Unlock()
	if !ok {
		return false, nil
	}
	cond := bucket.Condition{IfVersion: h.Version}
	if bugs.UnconditionalParkedRelease { // false unless a simulation test plants the bug
		cond = bucket.Condition{}
	}
	return true, o.writeRelease(ctx, h, cond, next)
}

// ParkedReleases is how many parked records ReleaseAllParked releases at
// a time, each within its own ReleaseTimeout: a node with many parked
// rooms releases them all within a clean stop's moment.
const ParkedReleases = 16

// ReleaseAllParked releases every parked record (a drain's pass, a clean
// stop), ParkedReleases at a time, and says how many releases landed (the
// others are pending). It starts none once ctx ends, and returns when
// those started end: each is bounded on its own (ReleaseTimeout), not
// cut by ctx. The records not started stay parked, for a later pass or
// the lease's release (a clean stop's Leave), which frees them.
func (o *Owners) ReleaseAllParked(ctx context.Context) int {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		landed int
	)
	slots := make(chan struct{}, ParkedReleases)
	each := context.WithoutCancel(ctx)
	for _, a := range o.ParkedActors() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if ok, err := o.ReleaseParked(each, a); ok && err == nil {
				mu.Lock()
				landed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return landed
}

// pendingLocked reports whether h's release is pending; o.mu is held.
func (o *Owners) pendingLocked(h Hold) bool {
	for _, e := range o.pending {
		if e.kind == release && e.actor == h.Actor && e.generation == h.Generation {
			return true
		}
	}
	return false
}

// ReleaseAll releases every hold and every parked record (a clean stop);
// it returns how many releases are left pending (parked records not
// started once ctx ended among them: Pending).
func (o *Owners) ReleaseAll(ctx context.Context) int {
	for _, h := range o.Holds() {
		o.Release(ctx, h) //nolint:errcheck // a failure is kept pending, counted below
	}
	o.ReleaseAllParked(ctx)
	return o.Pending()
}

// Holds lists this process's holds in actor order.
func (o *Owners) Holds() []Hold {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holdsLocked()
}

// holdsLocked is the holds in actor order, so that a clean stop's releases
// and a lapse's pending entries go out in the same order every time (a
// seeded simulation replays them exactly); o.mu is held.
func (o *Owners) holdsLocked() []Hold {
	hs := make([]Hold, 0, len(o.holds))
	for _, h := range o.holds {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b Hold) int { return strings.Compare(a.Actor.Key(), b.Actor.Key()) })
	return hs
}

// DropAll is the lease's lapse: every hold and every parked record ends
// here at once, each kept as a pending release with its generation and
// acquire version; nothing is written now. It returns how many parked
// records it ended.
func (o *Owners) DropAll() int {
	now := o.clk.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.holdsLocked() {
		o.pending = append(o.pending, &entry{kind: release, actor: h.Actor, generation: h.Generation, version: h.Version, since: now})
	}
	parked := len(o.parked)
	for _, a := range o.parkedLocked() {
		h := o.parked[a]
		o.pending = append(o.pending, &entry{kind: release, actor: a, generation: h.Generation, version: h.Version, since: now})
	}
	clear(o.holds)
	clear(o.parked)
	return parked
}

// Abandon is the lease's loss: every hold, parked record and entry is
// dropped without writing anything (the fence, or the other instance,
// frees the records).
func (o *Owners) Abandon() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.holds)
	clear(o.parked)
	o.pending = nil
}

// Pending is how many releases and acquisitions are unresolved, parked
// records counted (a drain, and a clean stop's wait, end only at zero).
func (o *Owners) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending) + len(o.parked)
}

// unresolved is how many entries the background pass has to resolve.
func (o *Owners) unresolved() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// Resolve makes one pass over the pending entries, each under its
// actor's lock, while the node lease is valid and until MaxRefusals in a
// row failed to end; it reports how many ended.
func (o *Owners) Resolve(ctx context.Context) int {
	o.mu.Lock()
	es := append([]*entry(nil), o.pending...)
	o.mu.Unlock()
	ended, refused := 0, 0
	for _, e := range es {
		if !o.lease.Valid() || ctx.Err() != nil || refused == MaxRefusals {
			break
		}
		unlock := o.lock(e.actor)
		var done bool
		if e.kind == release {
			done = o.resolveRelease(ctx, e)
		} else {
			done = o.resolveAcquire(ctx, e)
		}
		unlock()
		if refused++; done {
			refused = 0
			ended++
			o.mu.Lock()
			for i, p := range o.pending {
				if p == e {
					o.pending = append(o.pending[:i], o.pending[i+1:]...)
					break
				}
			}
			o.mu.Unlock()
		}
	}
	return ended
}

// resolveRelease sends the same release again, If-Match on the hold's
// acquire version (never a version read later). It ends when that lands
// or a read shows the record no longer names this process at that
// generation.
func (o *Owners) resolveRelease(ctx context.Context, e *entry) bool {
	if _, err := o.put(ctx, e.actor, Record{Generation: e.generation}, bucket.Condition{IfVersion: e.version}); err == nil {
		return true
	}
	rec, _, _, found, err := o.read(ctx, e.actor, o.s.AttemptTimeout())
	if err != nil {
		return false
	}
	return !found || !o.ours(rec, e.generation)
}

// resolveAcquire reads the record: naming this process at the generation
// tried with no hold here (nor a parked record at that generation: a lost
// acquire followed by one that landed at it, then parked), it is a landed
// write, released If-Match on that read's version (kept as a pending
// release if that does not land); a parked record of an earlier
// generation is behind it then, and forgotten. A record unchanged since
// the acquisition read it keeps the entry (the write may still land) for
// ttl + grace; anything else ends it.
func (o *Owners) resolveAcquire(ctx context.Context, e *entry) bool {
	rec, body, v, found, err := o.read(ctx, e.actor, o.s.AttemptTimeout())
	if err != nil {
		return false
	}
	if found && o.ours(rec, e.generation) {
		o.mu.Lock()
		_, held := o.holds[e.actor]
		p, parked := o.parked[e.actor]
		if parked && p.Generation != e.generation {
			delete(o.parked, e.actor) // the landed write moved the record past it
			parked = false
		}
		o.mu.Unlock()
		if held || parked {
			return true
		}
		if _, err := o.put(ctx, e.actor, Record{Generation: e.generation}, bucket.Condition{IfVersion: v}); err != nil {
			o.keep(&entry{kind: release, actor: e.actor, generation: e.generation, version: v, since: o.clk.Now()})
		}
		return true
	}
	unchanged := found == (e.prior != nil) && bytes.Equal(body, e.prior)
	return !unchanged || !o.clk.Now().Before(e.since.Add(o.s.Takeover()))
}

// Run resolves the pending entries in the background until ctx ends: a
// pass every half period while entries end, backing off to ttl while a
// pass ends none, and waiting while the node lease is invalid.
func (o *Owners) Run(ctx context.Context) {
	base := o.s.Period() / 2
	wait := base
	for clock.Sleep(ctx, o.clk, wait) == nil {
		if o.unresolved() == 0 || !o.lease.Valid() {
			wait = base
			continue
		}
		if o.Resolve(ctx) > 0 {
			wait = base
		} else {
			wait = min(2*wait, o.s.TTL)
		}
	}
}

// Owner is the routing read: one GET of the record within OwnerTimeout.
// Whether the node it names is live is the membership view's to say.
func (o *Owners) Owner(ctx context.Context, a Actor) (Record, bool, error) {
	rec, _, _, found, err := o.read(ctx, a, OwnerTimeout)
	return rec, found, err
}
