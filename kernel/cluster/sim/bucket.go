package sim

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
)

// The simulated bucket: one store (buckettest.Memory, the bucket contract's
// reference) that every process reaches through a view of its own. A
// request is handed to the scheduler and takes effect at a seeded time
// (its linearisation point), and its reply comes back at another; requests
// from every process overlap as on a real store, and each may fail, lose
// its reply, be held and land late, or hang until the client gives up.

type op int

const (
	opGet op = iota
	opPut
	opDelete
	opList
)

var opNames = [...]string{"get", "put", "delete", "list"}

func (o op) String() string { return opNames[o] }

// ClientTimeout is the bucket client's own bound on a request, whatever
// its caller's context says: an answer that has not come by then is a
// transient failure (a request may still land after it).
const ClientTimeout = 30 * time.Second

// errInjected is what every simulated failure wraps, with
// bucket.ErrTransient.
var errInjected = errors.New("sim: injected fault")

// errGone: the process that sent the request crashed.
var errGone = errors.New("sim: the process is gone")

type result struct {
	version bucket.Version
	data    []byte
	size    int64 // the whole object's, for a range read
	mod     time.Time
	page    bucket.ListPage
	err     error
}

type request struct {
	p       *process
	op      op
	key     string
	data    []byte
	cond    bucket.Condition
	get     bucket.GetOptions
	list    bucket.ListOptions
	reply   chan result
	id      uint64
	sent    time.Time
	res     result
	done    bool // replied, or the caller gave up: no reply is sent
	sentOut bool // dispatched by the scheduler (counted in waiting until done)
	gone    bool // the caller gave up (its context ended)
	landed  bool // the request took effect
}

// order sorts the requests sent in one round, whose goroutines ran side by
// side, into one order that depends only on what they ask.
func (r *request) order(o *request) int {
	if c := cmp.Compare(r.p.index, o.p.index); c != 0 {
		return c
	}
	if c := cmp.Compare(r.op, o.op); c != 0 {
		return c
	}
	if c := strings.Compare(r.key, o.key); c != 0 {
		return c
	}
	if c := bytes.Compare(r.data, o.data); c != 0 {
		return c
	}
	if c := cmp.Compare(r.cond.IfVersion, o.cond.IfVersion); c != 0 {
		return c
	}
	if c := cmp.Compare(fmt.Sprint(r.cond.IfAbsent, r.get, r.list), fmt.Sprint(o.cond.IfAbsent, o.get, o.list)); c != 0 {
		return c
	}
	return 0
}

func (r *request) String() string {
	s := fmt.Sprintf("#%d %s %s %s", r.id, r.p, r.op, r.key)
	switch {
	case r.cond.IfAbsent:
		s += " if-absent"
	case r.cond.IfVersion != "":
		s += " if " + string(r.cond.IfVersion)
	}
	if r.op == opPut {
		h := fnv.New32a()
		h.Write(r.data)
		s += fmt.Sprintf(" body %08x", h.Sum32())
	}
	return s
}

// view is one process's way to the bucket.
type view struct{ p *process }

var _ bucket.Bucket = view{}

func (v view) Get(ctx context.Context, key string, opts bucket.GetOptions) (*bucket.Object, error) {
	res := v.p.w.call(ctx, &request{p: v.p, op: opGet, key: key, get: opts})
	if res.err != nil {
		return nil, res.err
	}
	return &bucket.Object{Body: io.NopCloser(bytes.NewReader(res.data)), Size: res.size, Version: res.version, ModTime: res.mod}, nil
}

func (v view) Put(ctx context.Context, key string, body io.Reader, size int64, cond bucket.Condition) (bucket.Version, error) {
	data, err := io.ReadAll(bucket.SizedBody(body, size))
	if err != nil {
		return "", err
	}
	res := v.p.w.call(ctx, &request{p: v.p, op: opPut, key: key, data: data, cond: cond})
	return res.version, res.err
}

func (v view) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	return v.p.w.call(ctx, &request{p: v.p, op: opDelete, key: key, cond: cond}).err
}

func (v view) List(ctx context.Context, prefix string, opts bucket.ListOptions) (bucket.ListPage, error) {
	res := v.p.w.call(ctx, &request{p: v.p, op: opList, key: prefix, list: opts})
	return res.page, res.err
}

func (v view) Close() error { return nil }

// call hands r to the scheduler and waits for its reply or for ctx.
func (w *world) call(ctx context.Context, r *request) result {
	if err := ctx.Err(); err != nil {
		return result{err: err}
	}
	r.reply = make(chan result, 1)
	w.mu.Lock()
	if r.p.dead {
		w.mu.Unlock()
		return result{err: fmt.Errorf("%s %s: %w (%w)", r.op, r.key, errGone, bucket.ErrTransient)}
	}
	w.inbox = append(w.inbox, r)
	w.mu.Unlock()
	select {
	case res := <-r.reply:
		return res
	case <-ctx.Done():
		w.mu.Lock()
		r.gone = true
		w.finish(r)
		w.mu.Unlock()
		return result{err: ctx.Err()}
	}
}

// fault is what happens to one request.
type fault int

const (
	fNone fault = iota
	fFail       // refused before it takes effect
	fLost       // takes effect, the reply is lost
	fHeld       // a write held on the way, landing seconds later
	fHang       // never answered: the client gives up
)

var faultNames = [...]string{"", " fail", " lost-reply", " held", " hang"}

// send is the scheduler taking the requests of one round, in their order:
// each gets its fault and its two latencies from the seeded source.
func (w *world) send() {
	w.mu.Lock()
	rs := w.inbox
	w.inbox = nil
	w.mu.Unlock()
	// A request whose caller gave up within the step it was sent in never
	// left the client: whether it was sent before or after the cancel
	// depended on goroutines running side by side, not on the seed.
	w.mu.Lock()
	rs = slices.DeleteFunc(rs, func(r *request) bool { return r.gone })
	w.mu.Unlock()
	slices.SortStableFunc(rs, (*request).order)
	for i, r := range rs {
		if i > 0 && r.order(rs[i-1]) == 0 {
			w.res.Ties++
		}
		w.reqs++
		r.id = w.reqs
		w.mu.Lock()
		r.sentOut = true
		w.waiting++
		w.mu.Unlock()
		r.sent = w.clk.Now()
		w.dispatch(r)
	}
}

func (w *world) dispatch(r *request) {
	// The client's own timeout answers whatever is still waiting.
	w.after(ClientTimeout, func() {
		w.answer(r, result{err: fmt.Errorf("%s %s: timed out: %w (%w)", r.op, r.key, errInjected, bucket.ErrTransient)})
	})
	if r.p.cut {
		w.tracef("send %s: cut off", r)
		return
	}
	f := w.faultFor(r)
	aimed := w.aimed(r)
	if aimed {
		f = fHeld
	}
	pre, post := w.latency(), w.latency()
	w.tracef("send %s%s %v+%v", r, faultNames[f], pre, post)
	injected := func(what string) result {
		return result{err: fmt.Errorf("%s %s: %s: %w (%w)", r.op, r.key, what, errInjected, bucket.ErrTransient)}
	}
	switch f {
	case fFail:
		w.after(pre, func() { w.answer(r, injected("failed")) })
	case fHang:
	case fHeld:
		hold := w.held()
		if aimed {
			hold = w.ms(25000, 45000) // past a takeover and a delivery elsewhere
		}
		w.after(pre+hold, func() { w.land(r, true, post) })
	default:
		w.after(pre, func() {
			if w.land(r, false, post) && f == fLost {
				r.res = injected("reply lost")
			}
		})
	}
}

// land applies r at its linearisation point unless its process is cut off
// by then (a held write is past the cut already), then schedules its
// reply; it reports whether r took effect.
func (w *world) land(r *request, held bool, post time.Duration) bool {
	if r.p.cut && !held {
		if (r.op == opPut || r.op == opDelete) && w.rng.IntN(2) == 0 {
			// On the way when the partition began: it lands later.
			w.tracef("hold %s: its node was cut off", r)
			w.after(w.held(), func() { w.land(r, true, post) })
			return false
		}
		w.tracef("drop %s: cut off", r)
		return false
	}
	r.res = w.apply(r)
	r.landed = true
	w.after(post, func() {
		if r.p.cut {
			return // the client times out
		}
		w.answer(r, r.res)
	})
	return true
}

// finish marks r answered or given up; w.mu is held.
func (w *world) finish(r *request) {
	if !r.done && r.sentOut {
		w.waiting--
	}
	r.done = true
}

// answer delivers res to r's caller unless it was answered or gave up.
func (w *world) answer(r *request, res result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.done {
		return
	}
	w.finish(r)
	if r.p.dead {
		res = result{err: fmt.Errorf("%s %s: %w (%w)", r.op, r.key, errGone, bucket.ErrTransient)}
	}
	r.reply <- res
}

// apply runs r against the store, now.
func (w *world) apply(r *request) result {
	ctx := context.Background()
	now := w.clk.Now()
	var res result
	switch r.op {
	case opGet:
		o, err := w.store.Get(ctx, r.key, r.get)
		if err == nil {
			res.data, _ = io.ReadAll(o.Body)
			res.size = o.Size
			res.version, res.mod = o.Version, w.mod[r.key]
		}
		res.err = err
	case opPut:
		cond := r.cond
		if w.cfg.BlindLeaseWrites && strings.HasPrefix(r.key, "nodes/") {
			cond = bucket.Condition{} // planted: an unconditional lease write
		}
		res.version, res.err = w.store.Put(ctx, r.key, bytes.NewReader(r.data), int64(len(r.data)), cond)
		if res.err == nil {
			w.mod[r.key] = now
		}
	case opDelete:
		res.err = w.store.Delete(ctx, r.key, r.cond)
		if res.err == nil {
			delete(w.mod, r.key)
		}
	case opList:
		res.page, res.err = w.store.List(ctx, r.key, r.list)
		for i := range res.page.Entries {
			res.page.Entries[i].ModTime = w.mod[res.page.Entries[i].Key]
		}
	}
	outcome := "ok"
	switch {
	case res.err != nil:
		outcome = res.err.Error()
	case r.op == opPut:
		outcome = "ok " + string(res.version)
	case r.op == opGet:
		outcome = "ok " + string(res.version)
	case r.op == opList:
		outcome = fmt.Sprintf("ok %d", len(res.page.Entries))
	}
	w.mu.Lock()
	gone := r.gone
	w.mu.Unlock()
	late := ""
	if gone && res.err == nil && (r.op == opPut || r.op == opDelete) {
		late = " (late: its caller gave up)"
		w.res.LateWrites++
	}
	w.tracef("apply %s: %s%s", r, outcome, late)
	w.landed(r, res)
	return res
}
