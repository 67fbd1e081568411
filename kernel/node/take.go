package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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
	case errors.As(err, &elsewhere) && !elsewhere.Owner.Taker:
		w.Header().Set(holderHeader, elsewhere.Owner.Node)
		http.Error(w, "held by node "+elsewhere.Owner.Node, http.StatusConflict)
	case errors.As(err, &f):
		writeOutcome(w, outcome{err: err})
	default:
		n.refuse(w, err) // writes nothing if the sender left
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
// node's hold: its alarm was armed as the hold started, from the
// database, which must be readable (or the sender keeps its own
// registration and asks again).
func (a *actor) taken(ctx context.Context) outcome {
	if a.db != nil {
		if _, _, _, err := alarm.Read(ctx, a.db); err != nil {
			return outcome{err: unavailable("the actor's alarm cannot be read now, retry", err)}
		}
	}
	return outcome{}
}

// errTakeRefused is a take the peer did not carry out.
var errTakeRefused = errors.New("the peer did not take the actor")

// sendTake asks peer to take class's actor name: nil once peer holds it
// (200, or 409 naming peer itself).
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
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch holder := resp.Header.Get(holderHeader); {
	case resp.StatusCode == http.StatusOK, resp.StatusCode == http.StatusConflict && holder == peer:
		return nil
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: node %s holds it", errTakeRefused, holder)
	}
	return fmt.Errorf("%w: %d %s", errTakeRefused, resp.StatusCode, strings.TrimSpace(string(msg)))
}

// handOffAlarm has the peer that takes class's actor name (key) in this
// node's stead take it, so that the alarm this node's timer holds for at
// fires there, on time: true once that peer holds it, this node's
// registration for at then forgotten (only that one: clear if). False
// with no such peer (noPeer) or when the take failed: the alarm stays
// here, or is the caller's to schedule again.
func (n *Node) handOffAlarm(class, name, key string, at time.Time) (ok, noPeer bool) {
	m := n.opts.Cluster.Member
	owner, err := ownerKey(abi.Address{Tenant: n.opts.App.Tenant, Class: class, Name: name})
	if err != nil {
		return false, true
	}
	peer, found := placement.TakeTarget(m.View, n.opts.App.String(), owner)
	if !found {
		return false, true
	}
	if err := n.sendTake(n.ctx, peer.ID, class, name); err != nil {
		n.log.Warn("handing an alarm off: the peer did not take the actor", "actor", key, "node", peer.ID, "err", err)
		return false, false
	}
	n.alarms.ClearAt(key, at)
	n.log.Info("alarm handed off: the peer took the actor", "actor", key, "node", peer.ID, "at", at.UnixMilli())
	return true, false
}

// handOffAlarms hands off (handOffAlarm), all at once, the alarms this
// node's timer holds for the actors of batch that were handed over.
func (n *Node) handOffAlarms(batch []*actor) {
	var wg sync.WaitGroup
	for _, a := range batch {
		select {
		case <-a.done:
		default: // not handed over (yet): it holds its alarm
			continue
		}
		if at, ok := n.alarms.At(a.key); ok {
			wg.Go(func() { n.handOffAlarm(a.class.name, a.addr.Name, a.key, at) })
		}
	}
	wg.Wait()
}
