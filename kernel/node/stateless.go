package node

import (
	"net/http"

	"github.com/wasmkeep/wasmkeep/kernel/abi"
	"github.com/wasmkeep/wasmkeep/kernel/storage"
)

// statelessKey names the stateless component in the log (actor=stateless).
const statelessKey = "stateless"

// errStateless refuses storage calls (SQL, delete-self) of the stateless
// component.
var errStateless = storage.Errorf(abi.SQLNotAllowed, "the stateless component has no database")

// serveStateless answers a path outside /actor/ and /_wasmkeep/ with the
// stateless component: a fresh instance for the request, run as an event
// with the same limits, closed when it ends. It has no mailbox: requests run
// side by side, each holding one of the node's instance slots, so
// MaxInstances bounds actors and stateless requests together.
func (n *Node) serveStateless(w http.ResponseWriter, r *http.Request, front *class) {
	payload, ok := n.readRequest(w, r, r.URL.EscapedPath())
	if !ok {
		return
	}
	if n.stopping.Load() {
		n.refuse(w, errStopping)
		return
	}
	if err := n.admit(r.Context()); err != nil {
		n.refuse(w, err)
		return
	}
	n.wg.Add(1) // the node closes the engine only after the instance
	defer func() {
		<-n.slots
		n.wg.Done()
	}()
	a := newActor(n, front, abi.Address{Tenant: n.opts.App.Tenant}, statelessKey, nil)
	ev := &event{ctx: r.Context(), payload: payload, reply: make(chan outcome, 1), class: front}
	a.handle(ev)
	a.discardInstance()
	if out := <-ev.reply; !out.skipped {
		writeOutcome(w, out)
	}
}

// actorOnly fails the event of the stateless component when it calls fn,
// a host function that needs an actor and has no way to report an error.
func (st *eventState) actorOnly(fn string) {
	if st.actor.class.stateless {
		faultf("%s: the stateless component is not an actor (no address, no alarms)", fn)
	}
}
