package history

import (
	"fmt"
	"time"

	"github.com/wasmkeep/wasmkeep/kernel/cluster/internal/bugs"
)

// DefaultRetention is --history-retention-secs' default: history younger
// than this is kept, so a bug can be noticed before it is gone.
const DefaultRetention = 3600 * time.Second

// Collectable is book ADR 0012's rule, a pure function of a listing: what
// the holder of generation h may delete once snap, a snapshot it uploaded
// itself and saw acknowledged (created by this call while its hold was
// valid: the caller's part of the rule), is in the bucket.
//
// snap must be at a segment h wrote (its generation is h), and the listing
// must hold snap and that segment; otherwise nothing is collectable and the
// error says why. A listing holding a generation above h means h is no
// longer the holder: nothing either.
//
// Collectable then are the objects with a txid below snap's, of any
// generation, and the objects of a generation below h, at any txid; never
// snap nor the segment at its position (kept so that a late upload of an
// earlier generation cannot become the head), never h's segments after it,
// never a key that is not history (Listing.Unknown), and, when retention is
// above 0, never an object whose listed time is less than retention before
// now. A retention of 0 is no window at all (a delete's erasure, book ADR 0028).
func Collectable(l Listing, h uint64, snap Key, retention time.Duration, now time.Time) ([]Object, error) {
	if snap.Kind != Snapshot {
		return nil, fmt.Errorf("history: collect after a %s: only after a snapshot", snap)
	}
	if snap.Gen != h {
		return nil, fmt.Errorf("history: collect after the %s by generation %d: only after a snapshot of the holder's own generation", snap, h)
	}
	p := snap.Pos()
	haveSnap, haveSeg := false, false
	for _, o := range l.Objects {
		switch {
		case o.Key.Gen > h:
			return nil, fmt.Errorf("history: generation %d is not the newest: the listing holds the %s", h, o.Key)
		case o.Key == snap:
			haveSnap = true
		case o.Key.Kind == Segment && o.Key.Pos() == p:
			haveSeg = true
		}
	}
	if !haveSnap {
		return nil, fmt.Errorf("history: the %s is not in the listing", snap)
	}
	if !haveSeg {
		return nil, fmt.Errorf("history: no segment at %s in the listing", p)
	}
	var out []Object
	for _, o := range l.Objects {
		if o.Key.TXID >= p.TXID && o.Key.Gen >= h && !bugs.Collects(o.Key == snap) { // snap, the segment at it and what follows
			continue
		}
		if retention > 0 && now.Sub(o.Entry.ModTime) < retention {
			continue
		}
		out = append(out, o)
	}
	return out, nil
}
