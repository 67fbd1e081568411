package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/node/access"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// Versions (ADR 1045; book ADR 0008 with its revision of 2026-11-04): the
// node serves one version whole, its classes, their rules and
// configuration, and the front, each class stamped with the version's seq.
// A deployed version replaces it whole (Apply), or not at all. Every event
// takes its class once, where it arrives; where it executes (runEvent) the
// actor's data is checked against that class's seq (upToDate), so a node
// never runs old code on data newer code has written.

// Version is a version the node serves whole.
type Version struct {
	ID      string               // the deployed version id ("" for --actor classes)
	Seq     uint64               // current's seq; 0 for --actor classes (which record none)
	Classes map[string]ClassSpec // by class name
	Front   string               // module file of the stateless component, "" for none
}

// ClassSpec is one class of a Version.
type ClassSpec struct {
	Module   string            // module file (already checked against its digest)
	Access   access.Access     // who outside may reach its actors
	Config   map[string]string // deployed configuration; the app's secrets, then the node's --env values win by name
	Requires []string          // names that must be set (Config, the app's secrets or --env) or the class refuses its events
	Expire   time.Duration     // idle this long, an actor is deleted (ends.go); 0 never
}

// deployment is the version the node serves, as swapped in.
type deployment struct {
	id      string
	seq     uint64
	classes map[string]*class
	front   *class // nil for none
}

// codes are the compiled modules d serves, by version hash.
func (d *deployment) codes() map[string]*code {
	have := map[string]*code{}
	if d == nil {
		return have
	}
	for _, c := range d.classes {
		have[c.version] = c.code
	}
	if d.front != nil {
		have[d.front.version] = d.front.code
	}
	return have
}

// deployed returns the version the node serves and a channel closed when
// another replaces it.
func (n *Node) deployed() (*deployment, <-chan struct{}) {
	n.depMu.Lock()
	defer n.depMu.Unlock()
	return n.dep, n.swapped
}

// class is the class name serves now, nil if none: an event takes it once.
func (n *Node) class(name string) *class {
	d, _ := n.deployed()
	return d.classes[name]
}

// Apply replaces the version the node serves with v, whole: every class
// is loaded first (the code of unchanged bytes reused), then the classes,
// the front and the seq are swapped in at once. On any failure the node
// keeps the version it serves, and the error names the class. A version
// below the seq served is refused: a node never goes back in seq. The
// version served, applied again, takes its configuration anew.
func (n *Node) Apply(ctx context.Context, v Version) error {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	if n.stopping.Load() {
		return errStopping
	}
	cur, _ := n.deployed()
	switch {
	case v.Seq == 0:
		return fmt.Errorf("version %q has seq 0: a deployed version has a seq of 1 or more", v.ID)
	case v.Seq < cur.seq:
		return fmt.Errorf("version %q has seq %d, below the seq %d the node serves (version %q): a node never goes back in seq", v.ID, v.Seq, cur.seq, cur.id)
	case v.Seq == cur.seq && v.ID != cur.id:
		return fmt.Errorf("version %q has seq %d, which the node serves as version %q", v.ID, v.Seq, cur.id)
	}
	d, err := n.build(ctx, v, cur)
	if err != nil {
		return fmt.Errorf("version %q (seq %d): %w", v.ID, v.Seq, err)
	}
	n.swap(d, cur)
	return nil
}

// build loads every class of v (reusing the code cur serves for unchanged
// bytes), or none: what it compiled is closed again on a failure.
func (n *Node) build(ctx context.Context, v Version, cur *deployment) (*deployment, error) {
	have := cur.codes()
	var fresh []*code
	fail := func(err error) (*deployment, error) {
		for _, c := range fresh {
			c.close(context.Background())
		}
		return nil, err
	}
	load := func(path string) (*code, error) {
		c, isNew, err := n.loadCode(ctx, path, have)
		if isNew {
			fresh = append(fresh, c)
			have[c.version] = c // two classes of identical bytes share it
		}
		return c, err
	}
	d := &deployment{id: v.ID, seq: v.Seq, classes: map[string]*class{}}
	for _, name := range slices.Sorted(maps.Keys(v.Classes)) {
		spec := v.Classes[name]
		if !address.ValidIdent(name) {
			return fail(fmt.Errorf("class name %q must match [a-z][a-z0-9-]{0,63}", name))
		}
		c, err := load(spec.Module)
		if err != nil {
			return fail(fmt.Errorf("class %s: %w", name, err))
		}
		d.classes[name] = &class{code: c, name: name, seq: v.Seq, access: spec.Access, spec: spec} // its values at the swap
	}
	if v.Front != "" {
		c, err := load(v.Front)
		if err != nil {
			return fail(fmt.Errorf("stateless component: %w", err))
		}
		d.front = &class{code: c, seq: v.Seq, stateless: true}
	}
	for _, c := range fresh {
		n.preinitialise(c)
	}
	return d, nil
}

// withValues is d with each class's values from the three layers (values)
// and the required names they leave unset: n.secretsMu held, so that a
// secrets change and a version swapped at once both count.
func (n *Node) withValues(d *deployment) *deployment {
	out := &deployment{id: d.id, seq: d.seq, front: d.front, classes: map[string]*class{}}
	for _, name := range slices.Sorted(maps.Keys(d.classes)) {
		c := *d.classes[name]
		c.env, c.missing = n.values(name, c.spec.Config), nil
		for _, req := range c.spec.Requires {
			if _, ok := c.env[req]; !ok {
				c.missing = append(c.missing, req)
			}
		}
		out.classes[name] = &c
	}
	return out
}

// values is class's values, by name, last wins: its deployed
// configuration, then the app's secrets, then the node's --env. An overlap
// is logged by name and class, never by value.
func (n *Node) values(class string, config map[string]string) map[string]string {
	env := maps.Clone(config)
	for _, layer := range []struct {
		what string
		vars map[string]string
	}{
		{"the app's secret replaces the deployed configuration's value", n.secrets[class]},
		{"the node's --env value replaces the deployed configuration's or the app's secret", n.opts.Env[class]},
	} {
		for name, value := range layer.vars {
			if _, ok := env[name]; ok {
				n.log.Warn(layer.what, "class", class, "name", name)
			}
			if env == nil {
				env = map[string]string{}
			}
			env[name] = value
		}
	}
	return env
}

// swap makes d the version the node serves, in one step, and wakes the
// events waiting for it (upToDate); then retires what only cur served: the
// code, the timer's alarms of the classes d drops (they stay in their
// databases and the index) and their sockets (1012), and arms the alarms
// of the classes d serves anew.
func (n *Node) swap(d, cur *deployment) {
	n.secretsMu.Lock()
	d = n.withValues(d)
	n.install(d)
	n.secretsMu.Unlock()
	n.metrics.Deployed(d.id, d.seq)

	keep := d.codes()
	for version, c := range cur.codes() {
		if keep[version] != c {
			c.close(context.Background())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.classes)) {
		c := d.classes[name]
		n.log.Info("class loaded", "class", name, "module", c.path, "version", c.version[:12], "access", c.access.String(),
			"deployed", d.id, "seq", d.seq)
		if len(c.missing) > 0 {
			n.log.Warn("class refuses its events until its required configuration is set", "class", name, "missing", strings.Join(c.missing, ","))
		}
		if cur != nil && cur.classes[name] == nil {
			for key, e := range n.index.Class(name) {
				n.alarms.Set(key, e.Class, e.Name, time.UnixMilli(e.At))
			}
		}
	}
	if d.front != nil {
		n.log.Info("stateless component loaded", "module", d.front.path, "version", d.front.version[:12], "deployed", d.id, "seq", d.seq)
	}
	n.log.Info("serving version", "deployed", d.id, "seq", d.seq, "classes", len(d.classes))
	if cur == nil {
		return
	}
	for name := range cur.classes {
		if d.classes[name] != nil {
			continue
		}
		n.log.Info("class no longer served", "class", name, "deployed", d.id, "seq", d.seq)
		n.alarms.ClearClass(name)
		for _, key := range n.ws.Keys() {
			if _, rest, _ := strings.Cut(key, "/"); strings.HasPrefix(rest, name+"/") {
				n.ws.CloseActor(key, websocket.ServiceRestart, "the class is no longer served")
			}
		}
	}
}

// install makes d the deployment served and wakes the events waiting for
// another (upToDate).
func (n *Node) install(d *deployment) {
	n.depMu.Lock()
	defer n.depMu.Unlock()
	n.dep = d
	close(n.swapped)
	n.swapped = make(chan struct{})
}

// SetBehind says the node cannot follow its app's current version now
// (reason, which the log gives and readiness counts) or, with nil, that it
// follows it again. Each reason counts as a follow failure.
func (n *Node) SetBehind(reason error) {
	n.depMu.Lock()
	was := n.behindErr
	n.behindErr = reason
	n.depMu.Unlock()
	switch {
	case reason != nil:
		n.metrics.FollowFailed()
		if was == nil || was.Error() != reason.Error() {
			n.log.Warn("the node does not follow its app's current version", "err", reason)
		}
	case was != nil:
		n.log.Info("the node follows its app's current version again")
	}
}

// behind reports SetBehind's reason, nil for none.
func (n *Node) behind() error {
	n.depMu.Lock()
	defer n.depMu.Unlock()
	return n.behindErr
}

// seqKey is the row of the actor's host metadata that records the highest
// seq whose class ran an event on it.
const seqKey = "seq"

var (
	errDropped  = errors.New("the class is no longer served")
	errUnconfig = errors.New("required configuration is not set")
)

// upToDate is the version rule every event of an actor passes where it
// executes, after the hold check (openHeld, which opened the database and
// read the actor's recorded seq): the class the event took must still be
// served (else 404), and its seq must be at least the actor's, or the
// event waits briefly for a version that brings it there (Options.Behind
// asks the follower to read current at once) and runs on that version's
// class, unless it came from outside and that class's access rule is not
// the one that admitted it (503: its retry is decided under the new
// rule); otherwise it is refused with 503, never run. Seq-0 classes
// (--actor) are checked too: data with a recorded seq was written by
// deployed code. Before all that, a node that cannot open the app's
// secrets refuses it (503, a socket closed with 1011), checked again
// after the wait. An event whose class's values the node replaced since it
// arrived (a secrets change, a deploy) upgrades as a stale one does: no
// event starts on values replaced. The class must have its required
// configuration. Then it
// becomes the actor's (adopt), and its seq is recorded if it is above the
// actor's.
func (a *actor) upToDate(ctx context.Context, ev *event) error {
	c := ev.class
	if c.stateless { // no data, and the front it took serves the request
		return nil
	}
	if err := a.refuseBlocked(ev); err != nil {
		return err
	}
	var timeout <-chan time.Time
	for {
		d, swapped := a.node.deployed()
		now := d.classes[c.name]
		if now == nil {
			a.closeSocketOf(ev, websocket.ServiceRestart, "the class is no longer served")
			return &failure{public: "unknown class " + strconv.Quote(c.name), cause: errDropped, status: 404}
		}
		stale := a.seq > c.seq && !faultSkipSeqCheck()
		// A swap retired c's code before the event made an instance of it
		// (it waited in the mailbox): it runs on the version served, as a
		// stale event does, rather than fail.
		gone := now != c && !(a.inst != nil && a.class.code == c.code) && c.code.retired()
		// The node replaced the values c gives (a secrets change, a deploy
		// or both) since the event arrived: no event starts on them, it
		// runs on the version served, as a stale event does.
		replaced := now != c && now.seq >= c.seq && !maps.Equal(now.env, c.env)
		if !stale && !gone && !replaced {
			break
		}
		if now.seq >= a.seq { // a newer version came: the event upgrades
			if ev.fromOutside() && !now.access.Equal(ev.class.access) {
				// The new rule did not admit it: the retry passes the
				// front door under it.
				a.closeSocketOf(ev, websocket.ServiceRestart, "the app's access rule changed, reconnect")
				return unavailable("the app's access rule changed; retry",
					fmt.Errorf("admitted under %s, class %s at seq %d is %s", ev.class.access, c.name, now.seq, now.access))
			}
			c = now
			continue
		}
		if timeout == nil {
			if a.node.opts.Behind != nil {
				a.node.opts.Behind(a.seq)
			}
			t := a.node.clock.NewTimer(a.node.behindWait())
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-swapped:
			continue
		case <-timeout:
		case <-ev.ctx.Done(): // its sender left
		}
		a.node.log.Warn("event refused: the actor's data is from a newer version than this node serves", "actor", a.key, "recorded_seq", a.seq, "class_seq", now.seq)
		a.closeSocketOf(ev, websocket.ServiceRestart, "the app's newer version is not on this node yet, reconnect")
		return unavailable("the app's newer version is not on this node yet; retry",
			fmt.Errorf("the actor's data is at seq %d, class %s here at seq %d", a.seq, c.name, now.seq))
	}
	// Checked again after the wait: the node may have failed closed since.
	if err := a.refuseBlocked(ev); err != nil {
		return err
	}
	if len(c.missing) > 0 {
		a.closeSocketOf(ev, websocket.InternalError, "the actor's class is not configured on this node")
		return unavailable("the actor's class is not configured on this node; retry later",
			fmt.Errorf("class %s: %w: %s", c.name, errUnconfig, strings.Join(c.missing, ",")))
	}
	a.adopt(c)
	if c.seq > a.seq {
		if _, err := a.db.HostExec(ctx, "INSERT OR REPLACE INTO "+metaTable+" (key, value) VALUES ('"+seqKey+"', ?)",
			abi.Value{Kind: abi.KindInteger, Int: int64(c.seq)}); err != nil {
			return &failure{public: "internal error", cause: fmt.Errorf("recording the seq: %w", err)}
		}
		a.seq = c.seq
	}
	return nil
}

// behindWait is how long an event waits for a newer version: the
// admission wait, at least a second.
func (n *Node) behindWait() time.Duration { return max(n.opts.AdmissionWait, time.Second) }

// adopt makes c the actor's class. New bytes drop the instance (the next
// is made of c, on-init running again as its version differs); a changed
// configuration drops it too (on-init does not rerun: the version is the
// same); new rules alone keep it.
func (a *actor) adopt(c *class) {
	old := a.class
	if old == c {
		return
	}
	a.class = c
	if old.code != c.code || !maps.Equal(old.env, c.env) {
		a.discardInstance()
	}
}

// readSeq reads the seq the actor's database recorded (0 for none): once
// per activation.
func (a *actor) readSeq(ctx context.Context) error {
	v, ok, err := metaRow(ctx, a.db, seqKey)
	a.seq = 0
	switch {
	case err != nil || !ok:
		return err
	case v.Kind != abi.KindInteger || v.Int < 0:
		return fmt.Errorf("the actor's recorded seq is not a seq (kind %d)", v.Kind)
	}
	a.seq = uint64(v.Int)
	return nil
}

// closeSocketOf closes the socket of a WebSocket message that cannot run
// here with code, and reports whether it did: its client reconnects
// (1012) or is told the actor cannot run as configured (1011). An open's
// refusal is answered by the upgrade; a close needs nothing more.
func (a *actor) closeSocketOf(ev *event, code int, reason string) bool {
	if ev.ws == nil || ev.ws.hook != abi.ExportOnWebSocketMessage {
		return false
	}
	s := a.node.ws.Lookup(a.key, ev.ws.conn)
	if s != nil {
		a.node.ws.CloseWith(s, code, reason)
	}
	return s != nil
}
