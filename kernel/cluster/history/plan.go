package history

import (
	"errors"
	"fmt"

	"github.com/superfly/ltx"
)

// ErrBroken is what every error of a history that cannot be restored wraps:
// a missing link, two segments claiming one position, or a checksum that
// does not follow from the one before. The actor is then degraded: it
// refuses its events until the history is repaired, and is never restored
// to an older state instead (book ADR 0007, restore step 4).
var ErrBroken = errors.New("history: broken chain")

// BrokenError names where a chain breaks.
type BrokenError struct {
	Head Pos    // the head the restore walked back from
	At   Pos    // the position the walk could not get past
	What string // what is wrong there
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("history: broken chain: from head %s, at %s: %s", e.Head, e.At, e.What)
}

func (e *BrokenError) Unwrap() error { return ErrBroken }

// Plan is what a restore applies: Snapshot (nil: the empty database), then
// Segments in order. Head is the position the result holds; a zero Head
// with no objects is an actor with no history in the bucket.
type Plan struct {
	Head     Pos
	Snapshot *Object
	Segments []Object
}

// Empty reports whether the listing held no history at all.
func (p Plan) Empty() bool { return p.Head == Pos{} }

// Objects is every object the plan reads, in apply order.
func (p Plan) Objects() []Object {
	out := make([]Object, 0, len(p.Segments)+1)
	if p.Snapshot != nil {
		out = append(out, *p.Snapshot)
	}
	return append(out, p.Segments...)
}

// PlanRestore is restore steps 1 and 2 of book ADR 0007, from key names alone:
// the head is the newest segment of the highest generation (a snapshot only
// when the listing holds no segment: then the newest snapshot of the
// highest generation); from it, parent links are followed back to the
// empty database, stopping at the first snapshot on the way. A missing
// link, or two segments at one position, is a *BrokenError.
func PlanRestore(l Listing) (Plan, error) {
	segs := map[Pos][]Object{}
	snaps := map[Pos]Object{}
	var head Object
	haveSeg, haveSnap := false, false
	for _, o := range l.Objects {
		switch o.Key.Kind {
		case Segment:
			segs[o.Key.Pos()] = append(segs[o.Key.Pos()], o)
			if !haveSeg || newer(o.Key.Pos(), head.Key.Pos()) {
				head, haveSeg = o, true
			}
		case Snapshot:
			snaps[o.Key.Pos()] = o
		}
	}
	if !haveSeg {
		for _, o := range snaps {
			if !haveSnap || newer(o.Key.Pos(), head.Key.Pos()) {
				head, haveSnap = o, true
			}
		}
		if !haveSnap {
			return Plan{}, nil
		}
		return Plan{Head: head.Key.Pos(), Snapshot: &head}, nil
	}
	plan := Plan{Head: head.Key.Pos()}
	var back []Object // segments from the head backwards
	at := head.Key.Pos()
	for {
		if s, ok := snaps[at]; ok {
			plan.Snapshot = &s
			break
		}
		here := segs[at]
		switch len(here) {
		case 0:
			what := "no segment and no snapshot"
			if len(back) > 0 {
				what += fmt.Sprintf(" (the parent of %s)", back[len(back)-1].Key)
			}
			return Plan{}, &BrokenError{Head: plan.Head, At: at, What: what}
		case 1:
		default:
			return Plan{}, &BrokenError{Head: plan.Head, At: at, What: fmt.Sprintf("%d segments with different parents", len(here))}
		}
		back = append(back, here[0])
		if at.TXID == 1 {
			break // Check made its parent the empty database
		}
		at = Pos{TXID: at.TXID - 1, Gen: here[0].Key.Parent}
	}
	for i := len(back) - 1; i >= 0; i-- {
		plan.Segments = append(plan.Segments, back[i])
	}
	return plan, nil
}

// newer orders positions for the head: the higher generation, then the
// higher transaction.
func newer(a, b Pos) bool {
	if a.Gen != b.Gen {
		return a.Gen > b.Gen
	}
	return a.TXID > b.TXID
}

// Sums is what an LTX file's header and trailer say of its place in the
// chain.
type Sums struct {
	MinTXID, MaxTXID uint64
	PreApply         ltx.Checksum
	PostApply        ltx.Checksum
}

// CheckChain is restore step 3 of book ADR 0007 on what the files say, before
// any page is applied: the snapshot covers transactions 1 to its txid from
// nothing; each segment holds exactly its own transaction, and its
// pre-apply checksum is the post-apply checksum of what comes before it (0
// on the empty database, as LTX writes a file starting at transaction 1).
// sums holds every object of the plan; one missing or out of line is a
// *BrokenError naming it.
func CheckChain(p Plan, sums map[Key]Sums) error {
	var running ltx.Checksum // the empty database
	objs := p.Objects()
	for i, o := range objs {
		s, ok := sums[o.Key]
		if !ok {
			return &BrokenError{Head: p.Head, At: o.Key.Pos(), What: fmt.Sprintf("no header read for the %s", o.Key)}
		}
		if err := checkRange(p.Head, o.Key, s); err != nil {
			return err
		}
		if s.PreApply != running {
			before := "the empty database"
			if i > 0 {
				before = "the " + objs[i-1].Key.String()
			}
			return &BrokenError{Head: p.Head, At: o.Key.Pos(), What: fmt.Sprintf("the %s expects checksum %s before it, %s leaves %s", o.Key, s.PreApply, before, running)}
		}
		running = s.PostApply
	}
	return nil
}

// checkRange refuses a file that does not hold the transactions its key
// names: a snapshot 1 to its txid, a segment its txid alone.
func checkRange(head Pos, k Key, s Sums) error {
	wantMin := k.TXID
	if k.Kind == Snapshot {
		wantMin = 1
	}
	if s.MinTXID != wantMin || s.MaxTXID != k.TXID {
		return &BrokenError{Head: head, At: k.Pos(), What: fmt.Sprintf("the %s holds transactions %d to %d", k, s.MinTXID, s.MaxTXID)}
	}
	return nil
}
