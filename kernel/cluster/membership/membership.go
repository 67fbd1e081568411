// Package membership is a node's view of its peers, read from their node
// leases (nodes/<id>): the heartbeat listing, and the rule that says which
// peers count as live, which routing, trust between nodes and `wasmkeep
// cluster status` share.
package membership

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/bucket"
	"github.com/wasmkeep/wasmkeep/kernel/clock"
	"github.com/wasmkeep/wasmkeep/kernel/cluster/nodelease"
)

// Peer is one key under nodes/ as the listing read it: a node's lease,
// or (Err set) something that is not one.
type Peer struct {
	ID     string           // the key after nodes/
	Body   []byte           // the object as read
	Object nodelease.Object // decoded, when Err is nil
	// Err: not a node lease. The object is not format 3, its key names no
	// node (a folder marker "nodes/", a deeper key), or reading it failed
	// for a reason of its own (refused, not a timeout).
	Err error
}

// Live reports whether p counts as live at now: a live object written
// within the horizon (nodelease.Settings.Horizon) before now.
func (p Peer) Live(now time.Time, s nodelease.Settings) bool {
	return p.Err == nil && p.Object.State == nodelease.Live && now.Before(p.Expiry(s))
}

// Expiry is when a live p stops counting as live, unless written again.
func (p Peer) Expiry(s nodelease.Settings) time.Time { return p.Object.WrittenAt.Add(s.Horizon()) }

// Pin is the certificate fingerprint p publishes, or "" for none.
func (p Peer) Pin() string {
	if len(p.Object.Info.Pins) == 0 {
		return ""
	}
	return p.Object.Info.Pins[0]
}

// List lists nodes/ and reads every object listed, sorted by key. An
// object deleted between the listing and its read is left out. A key that
// is not a node lease (Peer.Err) is listed with its reason, so that one
// stray key leaves the rest of the listing working; only a failed listing,
// or a read that timed out or failed transiently (the bucket is not
// answering, not this object), fails it. Each request runs under bound
// (the listing, then each read: a node's lease attempt timeout each, not
// one for them all), or as it is when bound is nil.
func List(ctx context.Context, b bucket.Bucket, bound func(func(context.Context) error) error) ([]Peer, error) {
	if bound == nil {
		bound = func(op func(context.Context) error) error { return op(ctx) }
	}
	var entries []bucket.Entry
	err := bound(func(ctx context.Context) (err error) {
		entries, err = bucket.ListAll(ctx, b, nodelease.Prefix)
		return err
	})
	if err != nil {
		return nil, err
	}
	var peers []Peer
	for _, e := range entries {
		id := strings.TrimPrefix(e.Key, nodelease.Prefix)
		if err := nodelease.CheckNodeID(id); err != nil {
			peers = append(peers, Peer{ID: id, Err: fmt.Errorf("its key names no node (%w)", err)})
			continue
		}
		var r nodelease.Read
		err := bound(func(ctx context.Context) (err error) {
			r, err = nodelease.ReadObject(ctx, b, id)
			return err
		})
		switch {
		case err == nil:
			if r.Found {
				peers = append(peers, Peer{ID: id, Body: r.Body, Object: r.Object, Err: r.Err})
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, bucket.ErrTransient) || errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("reading %s: %w", e.Key, err)
		default:
			peers = append(peers, Peer{ID: id, Err: fmt.Errorf("unreadable: %w", err)})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	return peers, nil
}

// View is a node's view of its peers, replaced at each listing and read
// by routing and trust. Liveness is judged when asked, on the node's
// clock, so a peer whose lease stops being written leaves the view at its
// expiry whether or not the node can list the bucket.
type View struct {
	self string
	s    nodelease.Settings
	clk  clock.Clock

	mu       sync.RWMutex
	peers    map[string]Peer
	listedAt time.Time
	listings int
}

// NewView returns an empty view for the node self.
func NewView(self string, s nodelease.Settings, clk clock.Clock) *View {
	return &View{self: self, s: s, clk: clk, peers: map[string]Peer{}}
}

// Update replaces the view with a listing's peers (this node's own lease
// left out).
func (v *View) Update(peers []Peer) {
	m := make(map[string]Peer, len(peers))
	for _, p := range peers {
		if p.ID != v.self {
			m[p.ID] = p
		}
	}
	v.mu.Lock()
	v.peers, v.listedAt = m, v.clk.Now()
	v.listings++
	v.mu.Unlock()
}

// Listings counts the listings the view took.
func (v *View) Listings() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.listings
}

// ErrNotLive is a peer that does not count as live: absent from the last
// listing, not written within the horizon, fenced or released.
var ErrNotLive = errors.New("not live")

// Live returns the peer id if it counts as live now.
func (v *View) Live(id string) (Peer, error) {
	v.mu.RLock()
	p, ok := v.peers[id]
	v.mu.RUnlock()
	if !ok || !p.Live(v.clk.Now(), v.s) {
		return p, ErrNotLive
	}
	return p, nil
}

// Peers is the last listing's peers, whatever their state, by id.
func (v *View) Peers() []Peer {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]Peer, 0, len(v.peers))
	for _, p := range v.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Trusted maps every peer live now to the pin it publishes ("" for
// none): the set a transport accepts (transport.Transport.Trust).
func (v *View) Trusted() map[string]string {
	now := v.clk.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	m := map[string]string{}
	for id, p := range v.peers {
		if p.Live(now, v.s) {
			m[id] = p.Pin()
		}
	}
	return m
}

// NextExpiry is the earliest expiry among the peers live now, or the zero
// time: when Trusted changes next without a listing.
func (v *View) NextExpiry() time.Time {
	now := v.clk.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	var next time.Time
	for _, p := range v.peers {
		if e := p.Expiry(v.s); p.Live(now, v.s) && (next.IsZero() || e.Before(next)) {
			next = e
		}
	}
	return next
}
