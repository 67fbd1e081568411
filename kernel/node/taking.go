package node

import (
	"maps"
	"slices"
)

// Taking actors (book ADR 0014 and ADR 0016's fail-closed rule): a node
// takes actors unless some reason says it must not (its secrets cannot be
// opened; a drain). While one does, it claims no actor and hands over
// those it holds, so a node that can run them takes them.

// StopTaking makes the node take no actor for reason until ResumeTaking
// withdraws it; reasons add up.
func (n *Node) StopTaking(reason string) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	if n.notTaking == nil {
		n.notTaking = map[string]bool{}
	}
	n.notTaking[reason] = true
}

// ResumeTaking withdraws reason; the node takes actors again once no
// reason is left.
func (n *Node) ResumeTaking(reason string) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	delete(n.notTaking, reason)
}

// NotTaking lists why the node takes no actor now, sorted; none when it
// takes them.
func (n *Node) NotTaking() []string {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	return slices.Sorted(maps.Keys(n.notTaking))
}
