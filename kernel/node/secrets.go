package node

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
	"github.com/wasmkeep/wasmkeep/kernel/node/websocket"
)

// The app's secrets (the book's ADR 0016, "Nodes"; ADR 1050): a layer of
// each class's values between its deployed configuration and the node's
// --env (values), which a follower sets (SetSecrets) and which a secrets
// change swaps without recompiling anything. A node that cannot open the
// app's secrets fails closed (BlockSecrets): every event of the app's
// classes is refused where it executes (upToDate), the node takes no actor
// and is not ready.

var errSecrets = errors.New("the app's secrets cannot be opened on this node")

// SetSecrets makes values (by class, name to value) the app's secrets and
// rebuilds every class's values from the three layers, keeping its code,
// rules and seq. An event under way keeps the values it started with; a
// resident instance whose values changed is dropped at its next event
// (adopt). It waits for no Apply's compile (the book: a version this node
// cannot build does not delay a secrets change): the Apply takes the
// values at its swap, under secretsMu too.
func (n *Node) SetSecrets(values map[string]map[string]string) {
	n.secretsMu.Lock()
	defer n.secretsMu.Unlock()
	if n.stopping.Load() {
		return
	}
	n.secrets = values
	cur, _ := n.deployed()
	d := n.withValues(cur)
	for _, name := range slices.Sorted(maps.Keys(d.classes)) {
		if c := d.classes[name]; len(c.missing) > 0 && !slices.Equal(c.missing, cur.classes[name].missing) {
			n.log.Warn("class refuses its events until its required configuration is set", "class", name, "missing", strings.Join(c.missing, ","))
		}
	}
	n.install(d)
}

// BlockSecrets makes the node fail closed because it cannot open the app's
// secrets (reason, which never holds a value), or, with nil, serve again.
// It logs each change of reason.
func (n *Node) BlockSecrets(reason error) {
	n.depMu.Lock()
	was := n.secretsErr
	n.secretsErr = reason
	n.depMu.Unlock()
	switch {
	case reason != nil:
		n.StopTaking(nodelease.ReasonSecrets)
		if was == nil || was.Error() != reason.Error() {
			n.log.Error("the node cannot open its app's secrets: it refuses the app's events, takes no actor and is not ready", "err", reason)
		}
	case was != nil:
		n.ResumeTaking(nodelease.ReasonSecrets)
		n.log.Info("the node opened its app's secrets: it serves the app again")
	}
}

// secretsBlocked is BlockSecrets' reason, nil for none.
func (n *Node) secretsBlocked() error {
	n.depMu.Lock()
	defer n.depMu.Unlock()
	return n.secretsErr
}

// refuseBlocked is the failure of an event that cannot run while the
// node cannot open the app's secrets, nil when it can.
func (a *actor) refuseBlocked(ev *event) error {
	reason := a.node.secretsBlocked()
	if reason == nil {
		return nil
	}
	a.closeSocketOf(ev, websocket.InternalError, "the app's secrets cannot be opened on this node")
	return unavailable("the app's secrets cannot be opened on this node; retry", fmt.Errorf("%w: %w", errSecrets, reason))
}
