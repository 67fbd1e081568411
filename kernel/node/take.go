package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/callsign"
	"github.com/wasmkeep/wasmkeep/kernel/node/address"
	"github.com/wasmkeep/wasmkeep/kernel/node/alarm"
	"github.com/wasmkeep/wasmkeep/kernel/node/placement"
)

// The take call (book ADR 0017; ADR 1052): a signed node call, marked
// callsign.TakeHeader, that makes its receiver acquire and restore an
// actor, running no guest code, and arm its committed alarm (the hold's
// start arms it: scheduleFrom). A node sends it only to a peer whose
// heartbeat names nodelease.CapabilityTake. A node that takes no actor
// sends it for an actor it released with an alarm pending (a hand-over),
// or whose alarm fires here with nobody holding it, so the peer's timer
// fires the alarm on time rather than the sweep, later.

// holderHeader names, on a take's 409, the node that holds the actor.
const holderHeader = "x-wasmkeep-holder"

// takeTimeout bounds a take call (the book's 10 s: a restore can take a
// few).
const takeTimeout = 10 * time.Second

// takeBody is a take call's signed body: its version and the tenant.
func takeBody(tenant string) []byte { return []byte("wasmkeep-take 1\n" + tenant + "\n") }

// errNoSuchActor: a take for an actor found nowhere, which it does not
// create.
var errNoSuchActor = errors.New("no such actor")

// serveTake answers a verified take call for c/name: 200 once this node
// holds the actor, restored and its alarm armed; 403 for another tenant;
// 503 (Retry-After) while it takes no actor or cannot tell or take it
// now; 404 for an actor that does not exist, which is not created; 409
// naming the holder (holderHeader) when another node holds it.
func (n *Node) serveTake(w http.ResponseWriter, r *http.Request, c *class, name string, body []byte) {
	if !bytes.Equal(body, takeBody(n.opts.App.Tenant)) {
		http.Error(w, "a take for another tenant, or of another version: this node serves tenant "+n.opts.App.Tenant, http.StatusForbidden)
		return
	}
	err := n.take(r.Context(), c, name)
	var elsewhere *placement.Elsewhere
	var f *failure
	switch {
	case err == nil:
		io.WriteString(w, "taken\n")
	case errors.Is(err, errNoSuchActor):
		http.Error(w, "unknown actor "+address.EscapeName(name), http.StatusNotFound)
	case errors.As(err, &elsewhere) && !elsewhere.Owner.Taker && !elsewhere.Owner.Successor:
		w.Header().Set(holderHeader, elsewhere.Owner.Node)
		http.Error(w, "held by node "+elsewhere.Owner.Node, http.StatusConflict)
	case errors.As(err, &f):
		writeOutcome(w, outcome{err: err})
	case !n.refuse(w, err) && r.Context().Err() == nil:
		// Not one of a delivery's refusals, and the sender waits: it may
		// ask again.
		n.log.Warn("a take call failed", "actor", c.name+"/"+address.EscapeName(name), "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the actor cannot be taken now, retry", http.StatusServiceUnavailable)
	}
}

// take is a take's job (book ADR 0017, "At the target"): nil once this
// node holds c/name, restored and its alarm armed; errNoSuchActor for an
// actor that does not exist (not created); a *placement.Elsewhere naming
// the holder (not a Taker) when another node holds it; otherwise why it
// cannot now (a *failure, or deliver's refusal).
func (n *Node) take(ctx context.Context, c *class, name string) error {
	switch {
	case n.takesNone():
		return unavailable("this node takes no actor now", placement.ErrNoTaker)
	case c.stateless:
		return errNoSuchActor
	}
	// A hint learned while forwarding to the old holder must not answer
	// for the record.
	n.forgetOwner(abi.Address{Tenant: n.opts.App.Tenant, Class: c.name, Name: name})
	found, err := n.exists(ctx, c, name)
	switch {
	case err != nil:
		return unavailable("whether the actor exists cannot be checked now, retry", err)
	case !found:
		return errNoSuchActor
	}
	ev := &event{ctx: ctx, take: true, reply: make(chan outcome, 1)}
	if err := n.deliver(ctx, c, name, ev); err != nil {
		return err
	}
	select {
	case out := <-ev.reply:
		if out.skipped {
			return ctx.Err()
		}
		return out.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// taken ends a take event once the actor's database is open under this
// node's hold: it arms the alarm the database holds on this node's timer
// (the hold's start armed it too, but an actor held here already has had
// no start), and the alarm must be readable (or the sender keeps its own
// registration and asks again).
func (a *actor) taken(ctx context.Context) outcome {
	if a.db == nil {
		return outcome{}
	}
	at, _, pending, err := alarm.Read(ctx, a.db)
	if err != nil {
		return outcome{err: unavailable("the actor's alarm cannot be read now, retry", err)}
	}
	if pending { // armed from this read (book ADR 0017 step 5), whatever the hold's start did
		a.node.alarms.Set(a.key, a.class.name, a.addr.Name, time.UnixMilli(at))
	}
	return outcome{}
}

// errTakeRefused is a take the peer did not carry out; errTakeFinal one
// it will not carry out if asked again: the actor is not its to take
// (403, 404), its history cannot be restored (500), or another node
// holds it (errTakeHeld), whose timer fires the alarm.
var (
	errTakeRefused = errors.New("the peer did not take the actor")
	errTakeFinal   = errors.New("the peer refuses to take the actor")
	errTakeHeld    = fmt.Errorf("%w: another node holds it", errTakeFinal)
)

// sendTake asks peer to take class's actor name: nil once peer holds it
// (200 taken; serveTake answers 409 only naming another node).
func (n *Node) sendTake(ctx context.Context, peer, class, name string) error {
	cl := n.opts.Cluster
	if cl.Signer == nil {
		return errors.New("calls between nodes are off: the cluster secret could not be read")
	}
	ctx, cancel := clock.WithTimeout(ctx, n.clock, takeTimeout)
	defer cancel()
	body := takeBody(n.opts.App.Tenant)
	target := "/actor/" + class + "/" + address.EscapeName(name) + "/"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://wasmkeep"+address.EscapeTarget(target), bytes.NewReader(body))
	if err != nil {
		return err
	}
	cl.Signer.Sign(callsign.Call{Target: peer, App: n.opts.App.String(), Method: http.MethodPost, Path: hr.URL.RequestURI(), Body: body, Take: true}, hr.Header)
	resp, err := cl.Peers.Call(ctx, peer, hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(b))
	switch holder := resp.Header.Get(holderHeader); {
	case resp.StatusCode == http.StatusOK && msg == "taken":
		return nil
	case resp.StatusCode == http.StatusConflict && holder != "":
		return fmt.Errorf("%w: node %s", errTakeHeld, holder)
	case resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusInternalServerError:
		return fmt.Errorf("%w: %d %s", errTakeFinal, resp.StatusCode, msg)
	}
	// A 200 without the taken body is not the take call's answer: a build
	// that ran it as a request, or a proxy's page.
	return fmt.Errorf("%w: %d %s", errTakeRefused, resp.StatusCode, msg)
}

// handOff is how a hand-off of an alarm (handOffAlarm) ended.
type handOff int

const (
	handedOff  handOff = iota // the peer holds the actor: its timer fires the alarm
	takeFailed                // tried again later
	takeFinal                 // refused for good: dropped from this node's timer, left to the sweep
)

// takeTarget is the peer that takes class's actor name in this node's
// stead and answers take calls (placement.TakeTarget), if there is one.
func (n *Node) takeTarget(class, name string) (string, bool) {
	owner, err := ownerKey(abi.Address{Tenant: n.opts.App.Tenant, Class: class, Name: name})
	if err != nil {
		return "", false
	}
	peer, found := placement.TakeTarget(n.opts.Cluster.Member.View, n.opts.App.String(), owner)
	return peer.ID, found
}

// handOffAlarm has peer, the one that takes class's actor name (key) in
// this node's stead (takeTarget), take it, so that the alarm this node's
// timer holds for at fires there, on time. Once that peer holds it, or
// refuses it for good (its alarm index entry stays: the sweep's), this
// node's registration for at is forgotten (only that one: clear if).
func (n *Node) handOffAlarm(peer, class, name, key string, at time.Time) handOff {
	err := n.sendTake(n.ctx, peer, class, name)
	switch {
	case errors.Is(err, errTakeFinal):
		n.alarms.ClearAt(key, at)
		n.log.Warn("handing an alarm off: the peer refuses the actor; the alarm is left to the sweep", "actor", key, "node", peer, "err", err)
		return takeFinal
	case err != nil:
		n.log.Warn("handing an alarm off: the peer did not take the actor", "actor", key, "node", peer, "err", err)
		return takeFailed
	}
	n.alarms.ClearAt(key, at)
	n.log.Info("alarm handed off: the peer took the actor", "actor", key, "node", peer, "at", at.UnixMilli())
	return handedOff
}

// maxTakes is how many takes a node runs in the background at a time
// (startTake).
const maxTakes = handOverBatch

// handOffAlarms starts a hand-off (handOffAlarm) of each alarm this
// node's timer holds for an actor it does not hold (handed over, or
// hibernated before the drain), in the background (startTake) so that a
// peer slow to answer holds up no hand-over; one
// that fails keeps its entry for the next call. It returns how many such
// alarms are left that a peer could take, those under way included: the
// node is not drained while one is (book ADR 0014).
func (n *Node) handOffAlarms() (left int) {
	m := n.opts.Cluster.Member
	for _, it := range n.alarms.Items() {
		owner, err := ownerKey(abi.Address{Tenant: n.opts.App.Tenant, Class: it.Class, Name: it.Name})
		if err != nil {
			continue
		}
		if _, held := m.Owners.Owns(owner); held {
			continue // handed off as its hand-over ends
		}
		peer, found := n.takeTarget(it.Class, it.Name)
		if !found {
			continue
		}
		left++
		n.startTake(it.Key, func() { n.handOffAlarm(peer, it.Class, it.Name, it.Key, it.At) })
	}
	return left
}

// startTake runs f, a take for the actor key (a hand-off, or a move's
// target-side take), in the background (goTask), unless one is under way
// for it or maxTakes are, or the node is closing; it reports whether it
// started f.
func (n *Node) startTake(key string, f func()) bool {
	n.takeMu.Lock()
	start := !n.takesUnderWay[key] && len(n.takesUnderWay) < maxTakes
	if start {
		if n.takesUnderWay == nil {
			n.takesUnderWay = map[string]bool{}
		}
		n.takesUnderWay[key] = true
	}
	n.takeMu.Unlock()
	done := func() {
		n.takeMu.Lock()
		delete(n.takesUnderWay, key)
		n.takeMu.Unlock()
	}
	if start && !n.goTask(func() { defer done(); f() }) {
		done()
		return false
	}
	return start
}

// goTask runs f in a goroutine Close waits for (hand-offs, moves: they
// end with n.ctx); false, not running it, once Close began waiting.
func (n *Node) goTask(f func()) bool {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	if n.tasksClosed {
		return false
	}
	n.tasks.Add(1)
	go func() {
		defer n.tasks.Done()
		f()
	}()
	return true
}
