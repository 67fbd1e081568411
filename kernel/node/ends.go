package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/alarmindex"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/deletes"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/history"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/ownership"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/metrics"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// Actors that end by an operator's request (book ADR 0028, section 3; ADR
// 1053): `wasmkeep actor delete` writes a request in the bucket
// (kernel/cluster/deletes), every node of the app lists them once per
// lease period, and the node that holds the actor, or one that takes it
// when nobody holds it, queues a delete job in its mailbox. The job runs
// no guest code: it acquires and restores the actor as any event does
// (openHeld), closes its sockets, and deletes it through the one routine
// the guest's delete uses (removeDatabase: the reset, then the snapshot
// and the erase after the answer). The outcome is written beside the
// request only once the reset is in the bucket.

// operatorDeleteKey is the host meta key holding the last operator's
// delete carried out on the actor (deletes.Request.Marker), carried over
// by every later delete.
const operatorDeleteKey = "operator_delete"

// deleteBatch is how many requests a node carries out at a time (book ADR
// 0028: 16).
const deleteBatch = 16

// deletedReason is the reason of the 1000 closes of a deleted actor's
// sockets.
const deletedReason = "actor deleted"

// deleteJob is an operator's delete, or an idle actor's expiry, in an
// actor's mailbox; the actor sets what it found before it answers.
type deleteJob struct {
	req    deletes.Request // the operator's request; zero for an expiry
	expire bucket.Version  // an expiry: the record's version as listed, which the acquire requires
	// acquired is set by openDB when this job's own open acquired the
	// actor at the listed version: an expiry deletes nothing else (an
	// actor found open was woken since the listing).
	acquired bool
	result   deletes.Outcome // "" while the request stays, or the actor was not expired
	busy     bool            // its sockets were closed: their close events run first, then the job again
}

// runDeletes lists the app's delete requests once per lease period, until
// the node stops; a pass waits while the node's lease is not valid or its
// view of its peers, which decides who acts, is not trusted yet.
func (n *Node) runDeletes() {
	m := n.opts.Cluster.Member
	for clock.Sleep(n.ctx, n.clock, m.Lease.Settings().Period()) == nil {
		if n.stopping.Load() || !m.Ready() || m.View.Listings() < 2 {
			continue
		}
		if err := n.deletePass(n.ctx); err != nil && n.ctx.Err() == nil {
			n.log.Warn("listing the delete requests", "err", err)
		}
	}
}

// deletePass is one pass: expired requests and outcomes deleted, then the
// requests this node acts on carried out, deleteBatch at a time. It
// returns once they all ended, so no two passes work on one request.
func (n *Node) deletePass(ctx context.Context) error {
	state := n.opts.Cluster.Member.State
	now := n.clock.Now() // before the listing: a slow one never makes a request look older
	l, err := deletes.List(ctx, state)
	if err != nil {
		return err
	}
	if err := deletes.Expire(ctx, state, l, now); err != nil {
		n.log.Warn("deleting expired delete requests", "err", err)
	}
	slots := make(chan struct{}, deleteBatch)
	var wg sync.WaitGroup
	for _, r := range l.Requests {
		c := n.class(r.Class)
		if c == nil || deletes.Expired(r.At, now) || !n.actsOn(ctx, c, r.Name) {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			n.carryOut(ctx, c, r)
		}()
	}
	wg.Wait()
	return nil
}

// actsOn reports whether this node acts on a request for c/name: it holds
// the actor or has its sockets, or (unless it takes no actor) the record
// names nobody, this node, or a node not live in its view. Another live
// node holding it acts itself.
func (n *Node) actsOn(ctx context.Context, c *class, name string) bool {
	m := n.opts.Cluster.Member
	addr := abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name}
	key, err := ownerKey(addr)
	if err != nil {
		return false
	}
	if _, held := m.Owners.Owns(key); held || n.ws.Has(n.actorKey(c, name)) {
		return true
	}
	if n.takesNone() {
		return false
	}
	rec, found, err := m.Owners.Owner(ctx, key)
	switch {
	case err != nil:
		return false
	case !found || rec.Nobody() || rec.Node == m.Lease.NodeID():
		return true
	}
	_, err = m.View.Live(rec.Node)
	return err != nil
}

// carryOut runs r's job in the actor's mailbox (again once its sockets
// closed, if it had some) and writes its outcome; a job refused leaves the
// request for a later pass.
func (n *Node) carryOut(ctx context.Context, c *class, r deletes.Request) {
	key := n.actorKey(c, r.Name)
	n.forgetOwner(abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: r.Name})
	var job *deleteJob
	for range 2 {
		job = &deleteJob{req: r}
		if err := n.runDeleteJob(ctx, c, r.Name, job); err != nil {
			n.log.Info("an operator's delete waits for a later pass", "actor", key, "request", r.ID, "err", err)
			return
		}
		if !job.busy {
			break
		}
		// Their close events run in the mailbox before the job again.
		if n.awaitSocketsGone(ctx, key) != nil {
			return
		}
	}
	if job.result == "" {
		return
	}
	if err := deletes.Finish(ctx, n.opts.Cluster.Member.State, r, job.result); err != nil {
		n.log.Warn("an operator's delete: its outcome was not recorded, the request stays", "actor", key, "request", r.ID, "err", err)
		return
	}
	n.log.Info("an operator's delete ended", "actor", key, "request", r.ID, "outcome", job.result)
}

// runDeleteJob queues job in the mailbox of c/name, after the events
// queued there, and waits for it.
func (n *Node) runDeleteJob(ctx context.Context, c *class, name string, job *deleteJob) error {
	ev := &event{ctx: ctx, reply: make(chan outcome, 1), del: job}
	if err := n.deliver(ctx, c, name, ev); err != nil {
		return err
	}
	select {
	case out := <-ev.reply:
		switch {
		case out.err != nil:
			return out.err
		case out.skipped:
			return errors.New("not run: the node stops")
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runDelete is a delete job in the actor's mailbox, held and restored
// (runEvent): a request found carried out already is done once this
// hold's own upload ends the history (fence: until then what the restore
// read may be a reset that landed late and is not the state); sockets
// still open are closed first (1000, whatever the class's access: the
// operator asked for the actor to end) and the job runs again after
// their close events; then the delete, with the request recorded.
func (a *actor) runDelete(ctx context.Context, job *deleteJob) outcome {
	if job.expire != "" {
		return a.runExpiry(ctx, job)
	}
	mark, _, err := metaValue(ctx, a.db, operatorDeleteKey)
	if err != nil {
		return outcome{err: &failure{public: "internal error", cause: err}}
	}
	if job.req.CarriedOutBy(mark) {
		if err := a.fence(ctx); err != nil {
			return outcome{err: unavailable("the delete was carried out already; it is not fenced yet", err)}
		}
		job.result = deletes.Done
		return outcome{}
	}
	if a.node.ws.Has(a.key) {
		a.node.ws.CloseActor(a.key, websocket.Normal, deletedReason)
		job.busy = true
		return outcome{}
	}
	a.state.operatorMark = job.req.Marker(mark)
	err = a.removeDatabase()
	a.node.metrics.Deleted(metrics.DeleteOperator, err)
	if err != nil {
		return outcome{err: unavailable("the delete was not recorded", err)}
	}
	a.state.deleted = true // the end of the event: instance, alarm timer, local files
	job.result = deletes.Done
	return outcome{}
}

// runExpiry is an idle actor's expiry in its mailbox, run only if this
// job's own open acquired it at the version listed (openDB): an actor
// found open was woken since the listing, and is not idle. An actor with
// a pending alarm (its own database says, whatever the index listing
// showed) or a socket is not idle either, and stays; one with nothing of
// its own (expired already, or never written) is left as it is, so an
// expired actor is not expired, nor counted, again each limit; any other
// is deleted as the operator's delete does, its marker carried over.
func (a *actor) runExpiry(ctx context.Context, job *deleteJob) outcome {
	if !job.acquired {
		return outcome{}
	}
	_, _, pending, err := alarm.Read(ctx, a.db)
	if err != nil {
		return outcome{err: &failure{public: "internal error", cause: err}}
	}
	if pending || a.node.ws.Has(a.key) {
		return outcome{}
	}
	if empty, err := a.blank(ctx); err != nil {
		return outcome{err: &failure{public: "internal error", cause: err}}
	} else if empty {
		return outcome{}
	}
	err = a.removeDatabase()
	a.node.metrics.Deleted(metrics.DeleteExpired, err)
	if err != nil {
		return outcome{err: unavailable("the expiry was not recorded", err)}
	}
	a.state.deleted = true
	job.result = deletes.Done
	return outcome{}
}

// Idle expiry (book ADR 0028, section 4; ADR 1053). A class's
// expire-after-idle (a deployed version's expire line, or serve's
// --expire-after-idle) deletes its actors that no event touched for that
// long. An actor writes its ownership record when it is acquired and when
// it is released at hibernation, on whichever node it ran: a record that
// names nobody and was last modified longer ago than the limit is an
// actor idle that long (plus its idle timeout), and that survives any
// node's restart or takeover, since it is in the bucket.

// DefaultExpiryPass is Options.ExpiryPass's default (book ADR 0028: 10
// minutes).
const DefaultExpiryPass = 10 * time.Minute

// DefaultExpiryBudget is Options.ExpiryBudget's default: at most 100
// expiries a pass.
const DefaultExpiryBudget = 100

// expiryParallel is how many expiries of a pass run at a time.
const expiryParallel = 4

// runExpiry runs the expiry passes until the node stops: only on the
// collecting node of the app (collectsExpiry), while it takes actors, its
// lease is valid, its view of its peers is trusted and it is not behind
// on deploys. A job that acquired the actor, or found it woken since the
// listing, leaves its record rewritten: a kept actor (an alarm, a socket,
// nothing to expire) is listed again only a limit later. A record the
// job found changed or held (ownership.ErrChanged) keeps its version
// while its holder runs the actor, however long: it is not tried again
// at that version (changed), so that such records never fill a pass's
// budget ahead of idle ones. One not tried (past the budget) or refused
// for a passing reason is tried again by the next pass.
func (n *Node) runExpiry() {
	m := n.opts.Cluster.Member
	changed := map[string]bucket.Version{}
	for clock.Sleep(n.ctx, n.clock, n.opts.ExpiryPass) == nil {
		// A node behind on deploys runs no pass: it would judge by a limit
		// that may have changed (book ADR 0028).
		if n.stopping.Load() || !m.Ready() || m.View.Listings() < 2 || n.takesNone() || n.behind() != nil || !n.collectsExpiry() {
			continue
		}
		var err error
		if changed, err = n.expiryPass(n.ctx, changed); err != nil && n.ctx.Err() == nil {
			n.log.Warn("idle expiry", "err", err)
		}
	}
}

// collectsExpiry reports whether this node has the lowest id among itself
// and the live peers of its app that take actors. Two nodes whose views
// disagree may both collect: the conditional acquire makes that safe.
func (n *Node) collectsExpiry() bool {
	m := n.opts.Cluster.Member
	self := m.Lease.NodeID()
	for _, p := range placement.Takers(m.View, n.opts.App.String()) {
		if p.ID < self {
			return false
		}
	}
	return true
}

// expiryCandidate is an actor whose record was listed idle past its
// class's limit.
type expiryCandidate struct {
	class   *class
	name    string
	key     string // its record's key
	version bucket.Version
}

// expiryPass is one pass: the records of each class with a limit listed
// (one LIST per class) past the limit by the node's clock,
// read before the listings, and not of an actor with an alarm entry, one
// resident here or with a socket here, are expired, expiryParallel at a
// time. It returns the records found changed or held (changed, and those
// its jobs found so), by key, at the version listed, for the next pass to
// leave alone.
func (n *Node) expiryPass(ctx context.Context, changed map[string]bucket.Version) (map[string]bucket.Version, error) {
	state := n.opts.Cluster.Member.State
	now := n.clock.Now()
	d, _ := n.deployed()
	var limited []*class
	for _, name := range slices.Sorted(maps.Keys(d.classes)) {
		if c := d.classes[name]; c.spec.Expire > 0 {
			limited = append(limited, c)
		}
	}
	if len(limited) == 0 {
		return changed, nil
	}
	alarmed := map[string]bool{}
	entries, err := bucket.ListAll(ctx, state, alarmindex.TenantPrefix(n.opts.App.Tenant))
	if err != nil {
		return changed, err
	}
	for _, e := range entries {
		if k, err := alarmindex.ParseKey(e.Key); err == nil {
			alarmed[k.Class+"/"+k.Name] = true
		}
	}
	next := map[string]bucket.Version{}
	var todo []expiryCandidate
	for _, c := range limited {
		prefix := ownership.Actor{Tenant: n.opts.App.Tenant, Class: c.name}.Key()
		records, err := bucket.ListAll(ctx, state, prefix)
		if err != nil {
			return changed, err
		}
		for _, e := range records {
			enc := strings.TrimPrefix(e.Key, prefix)
			if now.Sub(e.ModTime) <= c.spec.Expire || alarmed[c.name+"/"+enc] || e.Version == "" {
				continue
			}
			if changed[e.Key] == e.Version {
				next[e.Key] = e.Version // still held, or never idle at this version
				continue
			}
			name, hashed, err := history.DecodeName(enc)
			key := n.actorKey(c, name)
			if err != nil || hashed || n.ws.Has(key) || n.resident(key) || len(todo) == n.opts.ExpiryBudget {
				continue
			}
			todo = append(todo, expiryCandidate{class: c, name: name, key: e.Key, version: e.Version})
		}
	}
	var mu sync.Mutex // guards next
	slots := make(chan struct{}, expiryParallel)
	var wg sync.WaitGroup
	for _, cand := range todo {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			job := &deleteJob{expire: cand.version}
			err := n.runDeleteJob(ctx, cand.class, cand.name, job)
			if errors.Is(err, ownership.ErrChanged) {
				mu.Lock()
				next[cand.key] = cand.version
				mu.Unlock()
			}
			if err != nil {
				return // the bucket, a lapse: tried again
			}
			if job.result == deletes.Done {
				n.log.Info("an idle actor expired", "actor", n.actorKey(cand.class, cand.name), "limit", cand.class.spec.Expire)
			}
		}()
	}
	wg.Wait()
	return next, nil
}

// blank reports whether the actor's database holds nothing of its own: no
// table, index, view or trigger but the host's, and no on-init recorded.
// Such an actor is what a new one would be (a delete's empty database).
func (a *actor) blank(ctx context.Context) (bool, error) {
	if _, initialised, err := metaValue(ctx, a.db, initVersionKey); err != nil || initialised {
		return false, err
	}
	var w abi.RowsWriter
	// sqlite_* are SQLite's own; the host's tables are _wasmkeep_*.
	err := a.db.HostQuery(ctx, `SELECT 1 FROM sqlite_schema WHERE name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name NOT LIKE '\_wasmkeep\_%' ESCAPE '\' LIMIT 1`, nil, &w)
	if err != nil {
		return false, err
	}
	r := abi.NewReader(w.Buf)
	_, rows := r.Columns()
	return rows == 0, r.Err()
}

// resident reports whether the actor keyed key is resident here.
func (n *Node) resident(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.actors[key] != nil
}
