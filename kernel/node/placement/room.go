package placement

import "github.com/wasmkeep/wasmkeep/kernel/cluster/membership"

// Roomy are the Takers of app whose heartbeat says they have room
// (nodelease.Info.Room, line 14): where a node whose every instance slot
// is busy may start an actor instead (ADR 1054).
func Roomy(view *membership.View, app string) []membership.Peer {
	var out []membership.Peer
	for _, p := range Takers(view, app) {
		if p.Object.Info.Room > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Relocation is the peer a full node sends an actor no node holds to:
// among the Roomy peers, the one whose share the actor's key is
// (Rendezvous), so two full nodes send the same actor to the same peer;
// false with none.
func Relocation(view *membership.View, app, key string) (Owner, bool) {
	p, ok := Rendezvous(key, Roomy(view, app))
	if !ok {
		return Here, false
	}
	return Owner{Node: p.ID, Addr: p.Object.Info.Advertise}, true
}
